"""moto's server (``python -m moto.server``) as a process: AWS services (Kinesis, Firehose,
CloudWatch Logs, S3, STS, Route 53, …) on 127.0.0.1 for what the edge and the ACME worker send
to AWS."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

from stacks import http
from stacks.ports import free_port
from stacks.process import read_tail, stop_process


class MotoServer:
    """moto's server on a free port; ``url`` is its endpoint. Its output goes to
    ``log_dir``/moto.log (a temporary directory when None)."""

    def __init__(self, log_dir: Optional[str] = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(log_dir or tempfile.mkdtemp(prefix="moto-"), "moto.log")
        self.process: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 60.0) -> "MotoServer":
        """Start and return once it answers; RuntimeError (with its log) when it does not."""
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if http.answers(self.url + "/moto-api/", timeout=2):
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"moto's server did not start: {read_tail(self.log_path, 3000)}")

    def stop(self) -> None:
        stop_process(self.process, signal.SIGTERM, timeout=15)

    def __enter__(self) -> "MotoServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
