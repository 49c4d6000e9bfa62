"""The edge (``python -m edge``) as a child of `make run`: same store, same data directory.

Its output is echoed with an ``edge:`` prefix; :func:`start` returns once the edge listens (it
printed its CA path) or raises with what it printed. :func:`stop` asks it to stop (SIGTERM:
it closes every agent session) and waits a bounded time.
"""
import os
import signal
import subprocess
import sys
import threading
from typing import Optional

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READY_MARK = "edge CA certificate"


def _die_with_parent() -> None:
    """Linux: SIGTERM the edge if serve.py dies without stopping it (kill -9)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def start(data_dir: str, timeout: float = 30.0) -> subprocess.Popen:
    env = dict(os.environ, DATA_DIR=os.path.abspath(data_dir), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "edge"], cwd=PROJECT_DIR, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True,  # Ctrl-C reaches it through serve.py
                            preexec_fn=_die_with_parent)
    ready = threading.Event()
    seen = []

    def echo() -> None:
        for line in proc.stdout:
            seen.append(line)
            print(f"edge: {line}", end="", flush=True)
            if READY_MARK in line:
                ready.set()
        ready.set()

    threading.Thread(target=echo, daemon=True).start()
    ready.wait(timeout)
    if proc.poll() is not None or not any(READY_MARK in line for line in seen):
        stop(proc)
        raise RuntimeError("the edge did not start:\n" + "".join(seen[-20:]))
    return proc


def stop(proc: Optional[subprocess.Popen], timeout: float = 8.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
