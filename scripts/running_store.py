"""Which stack's store a tool beside it should use: prints the first of the ``store.env``
files named on the command line whose store answers (a TCP connection to its
DYNAMODB_ENDPOINT_URL), or says why none does and exits 1.

`make api-key` calls it with `make run`'s (DATA_DIR/store.env) and `make cluster`'s
(DATA_DIR/cluster/stack/store.env): both files stay after their stack stops, so the one of
the stack running now is the one whose store listens.

    python scripts/running_store.py FILE [FILE ...]
"""

import socket
import sys
from typing import Dict, List, Optional
from urllib.parse import urlsplit


def read_env(path: str) -> Dict[str, str]:
    out = {}
    with open(path) as handle:
        for line in handle:
            name, _, value = line.strip().partition("=")
            if name:
                out[name] = value
    return out


def answers(url: str, timeout: float = 1.0) -> bool:
    parts = urlsplit(url)
    if not parts.hostname or not parts.port:
        return False
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout):
            return True
    except OSError:
        return False


def running(paths: List[str]) -> Optional[str]:
    for path in paths:
        try:
            url = read_env(path).get("DYNAMODB_ENDPOINT_URL", "")
        except OSError:
            continue
        if answers(url):
            return path
    return None


def main(argv: List[str]) -> int:
    found = running(argv)
    if found is None:
        print(
            "error: no running stack's store: start one first (make run or make cluster); "
            f"looked at {', '.join(argv)}",
            file=sys.stderr,
        )
        return 1
    print(found)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
