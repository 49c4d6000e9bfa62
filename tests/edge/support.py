"""What the edge test files share beyond the fixtures of conftest.py: a credential, the
events of an SDK agent read (bound, refused), a URL's host, a wait, a metric read from /metrics,
and a check that nothing a test did made an exception escape in the edge."""

import http.server
import os
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from prometheus_client.parser import text_string_to_metric_families


def credential(
    account: Any,
    acl: Optional[List[str]] = None,
    owner_id: Optional[str] = None,
    description: str = "edge test",
) -> Dict[str, Any]:
    """A new credential of ``account`` through its admin API key (its ``token`` is the
    authtoken)."""
    body: Dict[str, Any] = {"description": description}
    if acl is not None:
        body["acl"] = acl
    if owner_id is not None:
        body["owner_id"] = owner_id
    resp = account.admin.post("/credentials", body)
    assert resp.status == 201, resp.text
    return resp.json


def bound(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The agent's ``bound`` events (at least one)."""
    found = [e for e in events if e["event"] == "bound"]
    assert found, events
    return found


def refusal(events: List[Dict[str, Any]], stage: str) -> str:
    """The text of the agent's first error at ``stage`` (there is one)."""
    errors = [e for e in events if e["event"] == "error" and e["stage"] == stage]
    assert errors, events
    return " ".join(errors[0]["args"])


def host(url: str) -> str:
    return url.split("://", 1)[1].split(":", 1)[0].split("/", 1)[0]


def wait(predicate: Callable[[], Any], timeout: float = 15.0, step: float = 0.25) -> Any:
    """``predicate()``'s first true value within ``timeout``, else its last value."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def no_traceback_after(edge: Any) -> Iterator[None]:
    """For an autouse fixture: the edge's log gains no traceback while the test runs."""
    start = os.path.getsize(edge.log_path)
    yield
    with open(edge.log_path, errors="replace") as fh:
        fh.seek(start)
        written = fh.read()
    at = written.find("Traceback")
    assert at < 0, written[max(0, at - 2000) : at + 4000]


def open_files(pid: int) -> Tuple[int, int]:
    """(the soft limit of open files, how many are open) of process ``pid``."""
    with open(f"/proc/{pid}/limits") as fh:
        limit = next(int(line.split()[3]) for line in fh if line.startswith("Max open files"))
    return limit, len(os.listdir(f"/proc/{pid}/fd"))


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` (with these labels) in a /metrics text."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def core_counts(edge: Any) -> Tuple[float, float]:
    """The requests the core's HTTP path served, and the connections it handed to Python."""
    text = edge.metrics()
    return (
        metric(text, "edge_core_http_requests_total"),
        metric(text, "edge_core_http_handed_over_total"),
    )


def carried_by_the_core(edge: Any, exchange: Callable[[], bool]) -> bool:
    """Whether ``exchange()`` succeeded on the core's path: served there, nothing handed to
    Python meanwhile."""
    before = settled(lambda: core_counts(edge))
    ok = exchange()
    after = settled(lambda: core_counts(edge))
    return ok and after[0] > before[0] and after[1] == before[1]


def settled(read: Callable[[], Any]) -> Any:
    """``read()`` once two readings 0.2 s apart agree (the core counts a request just after
    its answer is written, so a client can read the answer first), at most 5 s."""
    last = read()
    for _ in range(25):
        time.sleep(0.2)
        now = read()
        if now == last:
            break
        last = now
    return last


def answering_upstream(body_of: Callable[[Any], str]) -> Iterator[int]:
    """A threaded HTTP/1.1 server on 127.0.0.1 whose every GET is answered 200 with
    ``body_of(handler)``; yields its port, shut down after (a module fixture's body)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = body_of(self).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
