"""A small HTTP client of the standard library's (the device agent's virtualenv has no
``requests``): what the starters here use to see a server up and to call the API."""

import http.client
import json
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, TypeVar

T = TypeVar("T")


@dataclass
class Resp:
    status: int
    headers: Dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"<Resp {self.status} {self.text[:400]}>"


def request(
    method: str,
    url: str,
    body: Any = None,
    headers: Optional[Dict[str, str]] = None,
    data: Optional[bytes] = None,
    timeout: float = 30.0,
    context: Optional[ssl.SSLContext] = None,
) -> Resp:
    """One request; an HTTP error status is a response, not an exception. ``body`` is sent
    as JSON."""
    headers = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            return Resp(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as err:
        return Resp(err.code, {k.lower(): v for k, v in err.headers.items()}, err.read())


def answers(url: str, timeout: float = 5.0) -> bool:
    """Whether anything answers HTTP at ``url`` (any status)."""
    try:
        request("GET", url, timeout=timeout)
        return True
    except (OSError, ValueError, http.client.HTTPException):  # refused, reset, timed out, …
        return False


def wait_for(predicate: Callable[[], T], timeout: float = 20.0, step: float = 0.25) -> T:
    """``predicate()`` once it is true, or its last value after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()
