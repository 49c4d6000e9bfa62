"""OpenSSH's client as an agent of the edge's SSH gateway (docs/SSH.md): :class:`SshAgent` runs
``ssh -R <forward> -p <port> <user>@127.0.0.1 <command…>`` (the system's openssh-client,
unmodified: Debian's ``ssh``) against an edge (anything with ``ssh_port``), with only the key
it is given and no configuration of the user's (``-F /dev/null``), and keeps what it prints;
:func:`new_key` makes a key pair with ``ssh-keygen``."""

import collections
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from typing import Any, Optional, Sequence, Tuple

from stacks.process import stop_process

URL_LINE = re.compile(r"^Forwarding\s+(\S+)", re.MULTILINE)


def ssh_binary() -> str:
    """The ``ssh`` on PATH, or "" (``apt-get install openssh-client``)."""
    return shutil.which("ssh") or ""


def new_key(
    directory: str, name: str = "id_ed25519", key_type: str = "ed25519"
) -> Tuple[str, str]:
    """(private key path, public key line) of a new key pair made by ``ssh-keygen``
    (``key_type``: ed25519, ecdsa, rsa, ...) in ``directory``."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", key_type, "-N", "", "-C", f"{name}@tests", "-f", path],
        check=True,
        capture_output=True,
        timeout=60,
    )
    with open(path + ".pub") as handle:
        return path, handle.read().strip()


class SshAgent:
    """``ssh -R`` as a process: ``stdout`` and ``stderr`` are read as they come (``out``,
    ``err``); :meth:`url` waits for the gateway's ``Forwarding`` line."""

    def __init__(
        self,
        edge: Any,
        key_path: str,
        forward: Optional[str],
        command: Sequence[str],
        *,
        user: str = "v2",
        options: Sequence[str] = (),
    ):
        args = [
            ssh_binary() or "ssh",
            "-F",
            "/dev/null",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "ConnectTimeout=20",
            "-i",
            key_path,
            "-p",
            str(edge.ssh_port),
            *options,
        ]
        if forward is not None:
            args += ["-R", forward]
        args += [f"{user}@127.0.0.1", *command]
        self.args = args
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._out: "collections.deque[str]" = collections.deque(maxlen=500)
        self._err: "collections.deque[str]" = collections.deque(maxlen=500)
        self._readers = [
            threading.Thread(
                target=self._pump, args=(self.process.stdout, self._out), daemon=True
            ),
            threading.Thread(
                target=self._pump, args=(self.process.stderr, self._err), daemon=True
            ),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _pump(pipe: Any, into: "collections.deque[str]") -> None:
        for line in pipe:
            into.append(line)

    @property
    def out(self) -> str:
        return "".join(self._out)

    @property
    def err(self) -> str:
        return "".join(self._err)

    def url(self, timeout: float = 30.0) -> str:
        """The URL the gateway printed; AssertionError (with what ssh printed) when ssh
        exited or printed none in time."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = URL_LINE.search(self.out)
            if found:
                return found.group(1)
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no URL from ssh ({self.args}): {self.printed()}")

    def wait(self, timeout: float = 30.0) -> int:
        """ssh's exit status once it exited (its output read whole)."""
        code = self.process.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=5)
        return code

    def printed(self) -> str:
        return f"exit {self.process.poll()}; stdout: {self.out!r}; stderr: {self.err!r}"

    def stop(self) -> None:
        stop_process(self.process, signal.SIGTERM, 10.0)
