"""The dashboard's files (dashboard/) on the API's own origin under ``/dashboard/``, for
`make run` (scripts/api_server.py asks :func:`handle` first). Deployed, the same files are a
static site (docs/DASHBOARD.md).

Only GET and HEAD of files inside dashboard/ (no listing, no dot files, nothing outside it:
the path is resolved and must stay under the folder); ``/dashboard`` redirects to
``/dashboard/``, which is ``index.html``. Every answer carries the strict
Content-Security-Policy :data:`CSP` (scripts, styles, images and API calls from this origin
only; no inline script or style, no eval, no frames, no form posts, no plugins) and headers
that keep it out of frames and its address out of Referer headers.
"""

import os
import posixpath
from typing import List, Optional, Tuple
from urllib.parse import unquote

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.join(PROJECT_DIR, "dashboard")
PREFIX = "/dashboard"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'; object-src 'none'"
)
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
    ".json": "application/json",
}
MAX_FILE_BYTES = 1024 * 1024

Headers = List[Tuple[str, str]]


def _headers(content_type: str) -> Headers:
    return [
        ("Content-Type", content_type),
        ("Content-Security-Policy", CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "no-referrer"),
        ("Cache-Control", "no-cache"),
        ("Cross-Origin-Opener-Policy", "same-origin"),
    ]


def _text(status: int, message: str) -> Tuple[int, Headers, bytes]:
    return status, _headers("text/plain; charset=utf-8"), (message + "\n").encode()


def handle(method: str, target: str) -> Optional[Tuple[int, Headers, bytes]]:
    """(status, headers, body) for a dashboard path, None for any other (the API's)."""
    path = target.split("?", 1)[0].split("#", 1)[0]
    if path != PREFIX and not path.startswith(PREFIX + "/"):
        return None
    if method not in ("GET", "HEAD"):
        status, headers, body = _text(405, "Method not allowed")
        return status, headers + [("Allow", "GET, HEAD")], body
    if path == PREFIX:
        status, headers, body = _text(308, "Moved to /dashboard/")
        return status, headers + [("Location", PREFIX + "/")], body
    relative = unquote(path[len(PREFIX) + 1 :]) or "index.html"
    if relative.endswith("/"):
        relative += "index.html"
    parts = relative.split("/")
    if "\x00" in relative or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return _text(404, "Not found")
    full = os.path.realpath(os.path.join(ROOT, *parts))
    if not full.startswith(os.path.realpath(ROOT) + os.sep) or not os.path.isfile(full):
        return _text(404, "Not found")
    content_type = TYPES.get(posixpath.splitext(full)[1].lower())
    if content_type is None or os.path.getsize(full) > MAX_FILE_BYTES:
        return _text(404, "Not found")
    with open(full, "rb") as handle_:
        return 200, _headers(content_type), handle_.read()
