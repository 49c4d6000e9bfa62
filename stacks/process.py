"""A child process with its output in a log file, and how every starter here stops one."""

import os
import signal
import subprocess
import time
from typing import Dict, List, Optional


def stop_process(
    process: Optional[subprocess.Popen], sig: int = signal.SIGINT, timeout: float = 20.0
) -> Optional[int]:
    """Send ``sig`` (SIGINT: as Ctrl-C) and wait; kill when it does not end in ``timeout``
    seconds. The exit status, or None when there was no process."""
    if process is None:
        return None
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def read_tail(path: str, size: int) -> str:
    """The last ``size`` characters of a log file ("" when it cannot be read)."""
    try:
        with open(path, errors="replace") as handle:
            return handle.read()[-size:]
    except OSError:
        return ""


class Process:
    """``args`` as a child process, its output (both streams) in ``log_path``."""

    def __init__(self, args: List[str], cwd: str, env: Dict[str, str], log_path: str):
        self.log_path = str(log_path)
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            args, cwd=cwd, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def log(self) -> str:
        return read_tail(self.log_path, 8000)

    def wait_for_line(self, text: str, timeout: float = 60.0) -> None:
        """Return once ``text`` is in the log; fail when the process ends first."""
        deadline = time.time() + timeout
        name = os.path.basename(self.log_path)
        while time.time() < deadline:
            if text in self.log():
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"{name}: exited early:\n{self.log()}")
            time.sleep(0.1)
        raise RuntimeError(f"{name}: no {text!r} in {timeout}s:\n{self.log()}")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 20.0) -> int:
        status = stop_process(self.process, sig, timeout)
        self._log.close()
        return status if status is not None else 0


def listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a TCP socket listening on ``port`` (any address), read
    from /proc: the listening sockets' inodes in /proc/net/tcp{,6} against the process's
    descriptors. For waiting on a listener that is not announced (SO_REUSEPORT listeners of
    several processes on one port)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                next(handle)
                for line in handle:
                    fields = line.split()
                    local, state, inode = fields[1], fields[3], fields[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{inode}]")
        except OSError:
            continue
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in descriptors:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except OSError:
            continue
    return False
