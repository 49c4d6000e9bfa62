"""A small User-Agent parser for ``req.user_agent.*`` (name, version, os, device, kinds).

The hosted service does not document its parser; this one recognises the common browsers,
command-line clients and crawlers by their product tokens, which is what policies match on
(``req.user_agent.is_bot``, ``req.user_agent.name == 'curl'``). Unknown agents read as
empty strings and false.
"""

import re
from functools import lru_cache
from typing import Any, Dict

# (name, pattern for the version) in priority order: Edge and Opera carry "Chrome" too,
# Chrome carries "Safari".
_BROWSERS = [
    ("Edge", r"Edg(?:e|A|iOS)?/([\d.]+)"),
    ("Opera", r"(?:OPR|Opera)/([\d.]+)"),
    ("Samsung Internet", r"SamsungBrowser/([\d.]+)"),
    ("Firefox", r"(?:Firefox|FxiOS)/([\d.]+)"),
    ("Chrome", r"(?:Chrome|CriOS)/([\d.]+)"),
    ("Safari", r"Version/([\d.]+).*Safari/"),
    ("curl", r"^curl/([\d.]+)"),
    ("Wget", r"^Wget/([\d.]+)"),
    ("Python Requests", r"python-requests/([\d.]+)"),
    ("Go-http-client", r"Go-http-client/([\d.]+)"),
    ("Googlebot", r"Googlebot/([\d.]+)"),
    ("Bingbot", r"bingbot/([\d.]+)"),
    ("GPTBot", r"GPTBot/([\d.]+)"),
    ("ClaudeBot", r"ClaudeBot/([\d.]+)"),
    ("MSIE", r"MSIE ([\d.]+)"),
]
_OS = [
    ("iOS", r"(?:iPhone|iPad|iPod).*? OS ([\d_]+)"),
    ("Android", r"Android ([\d.]+)"),
    ("Windows", r"Windows NT ([\d.]+)"),
    ("Mac OS X", r"Mac OS X ([\d_.]+)"),
    ("Chrome OS", r"CrOS \S+ ([\d.]+)"),
    ("Linux", r"Linux()"),
]
_BOT = re.compile(
    r"bot\b|crawl|spider|slurp|facebookexternalhit|embedly|bingpreview|"
    r"headless",
    re.I,
)


@lru_cache(maxsize=1024)
def parse(raw: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "raw": raw,
        "name": "",
        "version": "",
        "os": "",
        "os_version": "",
        "device": "",
        "url": "",
        "is_mobile": False,
        "is_tablet": False,
        "is_desktop": False,
        "is_bot": False,
    }
    if not raw:
        return out
    for name, pattern in _BROWSERS:
        match = re.search(pattern, raw)
        if match:
            out["name"], out["version"] = name, match.group(1)
            break
    for name, pattern in _OS:
        match = re.search(pattern, raw)
        if match:
            out["os"], out["os_version"] = name, match.group(1).replace("_", ".")
            break
    url = re.search(r"\+?(https?://[^\s;)]+)", raw)
    out["url"] = url.group(1) if url else ""
    out["is_bot"] = bool(_BOT.search(raw))
    out["is_tablet"] = bool(re.search(r"iPad|Tablet|Android(?!.*Mobile)", raw))
    out["is_mobile"] = not out["is_tablet"] and bool(re.search(r"Mobile|iPhone|iPod", raw))
    out["is_desktop"] = (
        not out["is_mobile"]
        and not out["is_tablet"]
        and not out["is_bot"]
        and out["os"] in ("Windows", "Mac OS X", "Linux", "Chrome OS")
    )
    for device in ("iPhone", "iPad", "iPod"):
        if device in raw:
            out["device"] = device
    if not out["device"] and out["os"] == "Android":
        model = re.search(r"Android [\d.]+; ([^;)]+)", raw)
        out["device"] = model.group(1).strip() if model else ""
    return out
