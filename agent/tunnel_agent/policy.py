"""Traffic policy documents: read the default policy file, check a document's outline.

The agent applies no policy itself: the edge does (the hosted service's traffic policy
language; docs/DATA_PLANE.md). The agent sends each tunnel's effective policy with its endpoint
(the SDK's ``traffic_policy``) and the edge's answer decides whether the document is valid:
a bind the edge refuses is an error of the API call and nothing is saved.

Checked here, before anything reaches the edge, is only the outline every valid document
has, so that obvious mistakes get an answer naming the element without a round trip:
a JSON object whose keys are phases of an HTTP endpoint, each a list of rule objects.
The default policy file gets the same check at start (an invalid file stops the agent).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import StartupError

HTTP_PHASES = ("on_http_request", "on_http_response")
EMPTY_POLICY: dict[str, Any] = {"on_http_request": [], "on_http_response": []}
MAX_POLICY_BYTES = 64 * 1024  # the encoded document; the hosted service limits policies too


class PolicyError(ValueError):
    def __init__(self, msg: str, path: str = "policy") -> None:
        super().__init__(msg)
        self.path = path


def check_outline(document: Any, where: str = "policy") -> dict[str, Any]:
    """``document`` if it has a policy's outline; PolicyError naming the element otherwise."""
    if not isinstance(document, dict):
        raise PolicyError(f"{where} must be an object mapping phases to lists of rules", where)
    for phase, rules in document.items():
        if phase not in HTTP_PHASES:
            raise PolicyError(
                f"{where} has unknown phase {phase!r}; an http tunnel's phases are "
                f"{', '.join(HTTP_PHASES)}",
                f"{where}.{phase}",
            )
        if not isinstance(rules, list):
            raise PolicyError(f"{where}.{phase} must be a list of rules", f"{where}.{phase}")
        for index, rule in enumerate(rules):
            if not isinstance(rule, dict):
                raise PolicyError(
                    f"{where}.{phase}[{index}] must be an object "
                    "with name, expressions and actions",
                    f"{where}.{phase}[{index}]",
                )
    try:
        size = len(encode(document).encode("utf-8"))
    except RecursionError:  # nested deeper than any policy needs
        raise PolicyError(f"{where} is nested too deeply", where) from None
    if size > MAX_POLICY_BYTES:
        raise PolicyError(f"{where} must be at most {MAX_POLICY_BYTES} bytes as JSON", where)
    return document


def has_rules(document: dict[str, Any]) -> bool:
    return any(rules for rules in document.values())


def encode(document: dict[str, Any]) -> str:
    """The policy as the JSON string shown in ``traffic_policy`` and sent to the edge."""
    return json.dumps(document, separators=(", ", ": "), ensure_ascii=False)


def load_default_policy(path: str | None) -> dict[str, Any]:
    """The default policy file (JSON when the name ends in .json, YAML otherwise); no file:
    a policy without rules. Anything unreadable or malformed stops the agent."""
    if not path:
        return dict(EMPTY_POLICY)
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StartupError(
            f"default policy file {path!r} cannot be read: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    try:
        if path.endswith(".json"):
            document = json.loads(raw)
        else:
            import yaml

            document = yaml.safe_load(raw)
    except (ValueError, RecursionError, Exception) as exc:  # yaml.YAMLError, JSONDecodeError
        raise StartupError(
            f"default policy file {path!r} is not valid "
            f"{'JSON' if path.endswith('.json') else 'YAML'}: {exc}"
        ) from None
    if document is None:
        document = {}
    try:
        return check_outline(document, "default policy")
    except PolicyError as exc:
        raise StartupError(f"default policy file {path!r} is invalid: {exc}") from None
