"""The tunnels file: atomic writes, strict reads.

Format: ``{"version": 1, "tunnels": [{"domain", "protocol", "forwards_to", "policy",
"created_at", "generated_domain", "url"}]}``. Writes go to a temporary file in the same directory, which is
flushed and fsynced, then ``os.replace``d over the real file, then the directory is
fsynced so the rename itself survives a power loss. A crash at any point leaves either
the previous file or the new one, never a mix. Reads never repair: a file that cannot be
read or parsed raises StartupError naming it, and nothing writes to it afterwards.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import StartupError

FORMAT_VERSION = 1
RECORD_KEYS = {"domain", "protocol", "forwards_to", "policy", "created_at"}


class TunnelsFile:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def clean_stale_temp_files(self) -> list[Path]:
        """Remove temporary files a crash left behind (``.<name>.*.tmp`` beside the file).

        Only the agent writes them, one at a time under its lock, and it calls this at
        start before any save, so every one found is stale. Returns what was removed."""
        removed = []
        try:
            candidates = list(self.path.parent.glob(f".{self.path.name}.*.tmp"))
        except OSError:
            return removed
        for candidate in candidates:
            try:
                candidate.unlink()
                removed.append(candidate)
            except OSError:
                pass
        return removed

    def load(self) -> list[dict[str, Any]]:
        """Saved tunnel records; ``[]`` when the file does not exist yet."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StartupError(
                f"tunnels file {str(self.path)!r} cannot be read: {exc.strerror or exc}; "
                "fix or remove it (it was left untouched)"
            ) from None
        try:
            document = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise StartupError(
                f"tunnels file {str(self.path)!r} is corrupt (not valid JSON: {exc}); "
                "fix or remove it (it was left untouched)"
            ) from None
        problem = _shape_problem(document)
        if problem:
            raise StartupError(
                f"tunnels file {str(self.path)!r} is corrupt ({problem}); "
                "fix or remove it (it was left untouched)"
            )
        return document["tunnels"]

    def save(self, records: list[dict[str, Any]]) -> None:
        """Replace the file atomically with ``records``. Raises OSError on failure."""
        data = (
            json.dumps({"version": FORMAT_VERSION, "tunnels": records}, indent=2).encode("utf-8")
            + b"\n"
        )
        directory = self.path.parent
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as tmp:
                tmp.write(data)
                tmp.flush()
                os.fsync(tmp.fileno())
            os.replace(tmp_name, self.path)
        except BaseException:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass
            raise
        _fsync_directory(directory)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories; the rename is done anyway
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _shape_problem(document: Any) -> str | None:
    if not isinstance(document, dict):
        return "top level is not an object"
    if document.get("version") != FORMAT_VERSION:
        return f"unsupported version {document.get('version')!r}, expected {FORMAT_VERSION}"
    tunnels = document.get("tunnels")
    if not isinstance(tunnels, list):
        return "'tunnels' is not a list"
    for index, record in enumerate(tunnels):
        if not isinstance(record, dict):
            return f"tunnels[{index}] is not an object"
        missing = RECORD_KEYS - set(record) - {"created_at"}
        if missing:
            return f"tunnels[{index}] lacks {sorted(missing)[0]!r}"
    return None
