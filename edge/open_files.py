"""The edge process's open-file limit, and what the edge does when it runs out of descriptors.

Every connection the edge holds is a file descriptor: agent sessions, public connections,
their proxy streams' upstreams, SSH connections in key exchange (up to
``server.MAX_UNAUTHENTICATED``, 512, by themselves). A process often starts with a soft limit
of 1,024 descriptors under a much higher hard limit, which the edge's own caps outgrow. So at
start the edge raises its soft limit to the hard one (:func:`raise_limit`), as Go's runtime
does for every Go program and nginx's ``worker_rlimit_nofile`` does for its workers, and says
the limit in its first lines.

Past the limit, ``accept`` fails (EMFILE). The core's listeners wait 10 ms and accept again;
asyncio's (the SSH gateway's, the metrics endpoint's) stop accepting for one second and then
go on, and asyncio would log each failure with a traceback. :func:`quiet_accept_failures`
makes that one warning line per failure (at most one per listener per second, as asyncio
pauses it) and counts it (``edge_accept_failures_total``); nothing else changes. A connection
that could not be accepted waits in the kernel's backlog, or is refused by it when the backlog
is full."""

import asyncio
import errno
import logging
import resource
from typing import Any, Dict, Tuple

log = logging.getLogger("edge.open_files")

# asyncio's message for an accept() that failed for want of a resource
# (selector_events.BaseSelectorEventLoop._accept_connection)
ACCEPT_FAILED = "socket.accept() out of system resource"
OUT_OF_FILES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Failures:
    """Accepts that failed for want of descriptors or memory, since the edge started."""

    count = 0


def raise_limit() -> Tuple[int, int]:
    """Raise RLIMIT_NOFILE's soft limit to its hard one; returns (soft, hard) as they are now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft != hard:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as exc:  # a kernel cap below the hard limit: keep soft
            log.warning("open files: soft limit kept at %d (hard %d): %s", soft, hard, exc)
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def quiet_accept_failures(loop: asyncio.AbstractEventLoop) -> None:
    """Log an asyncio listener's failed accept as one line (no traceback) and count it; every
    other exception goes to the handler the loop had."""
    previous = loop.get_exception_handler()

    def handle(loop: asyncio.AbstractEventLoop, context: Dict[str, Any]) -> None:
        exc = context.get("exception")
        if (
            context.get("message") == ACCEPT_FAILED
            and isinstance(exc, OSError)
            and exc.errno in OUT_OF_FILES
        ):
            Failures.count += 1
            sock = context.get("socket")
            where = sock.getsockname() if sock is not None else "?"
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            log.warning(
                "accept on %s failed: %s (open files limit %d); that listener waits 1 s",
                where,
                exc.strerror,
                soft,
            )
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)
