"""A traffic policy document: parse (JSON or YAML), check its shape, name where it breaks.

Shape (the hosted service's): the top level maps phases (``on_tcp_connect``,
``on_http_request``, ``on_http_response``, ``on_event_stream_message``) to lists of rules; a rule has an optional ``name``,
optional ``expressions`` (CEL strings, all must hold) and a non-empty ordered list of
``actions`` (``{type, config}``). Limits kept from the API's earlier validation: the document
is at most 16384 bytes, a phase at most 64 rules, a rule at most 32 expressions (each at most
1024 bytes) and 32 actions, a rule name at most 255 bytes. Any other key is refused.
"""

import json
from typing import Any, Iterator, List, Tuple

PHASES = ("on_tcp_connect", "on_http_request", "on_http_response", "on_event_stream_message")
MAX_DOCUMENT_BYTES = 16384
MAX_RULES_PER_PHASE = 64
MAX_EXPRESSIONS = 32
MAX_ACTIONS = 32
MAX_EXPRESSION_BYTES = 1024
MAX_NAME_BYTES = 255
RULE_KEYS = ("name", "expressions", "actions")
ACTION_KEYS = ("type", "config")


class PolicyError(ValueError):
    """A document the engine refuses; ``path`` names the element (``on_http_request[0].
    actions[1].config.status_code``), empty for the document as a whole."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


def parse(text: str) -> Any:
    size = len(text.encode("utf-8"))
    if size > MAX_DOCUMENT_BYTES:
        raise PolicyError("", f"it is {size} bytes; the limit is {MAX_DOCUMENT_BYTES} bytes")
    # Both parsers recurse once per nesting level: '[[[[…' within the size limit exhausts
    # Python's stack (RecursionError), which is the caller's bad input, not a crash.
    try:
        return json.loads(text)
    except ValueError:
        pass
    except RecursionError:
        raise PolicyError("", "it is nested too deeply") from None
    import yaml  # here, not at the top: ~11 ms of every cold start, needed only for YAML

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(
            "", f"it is neither JSON nor YAML ({str(exc).splitlines()[0]})"
        ) from None
    except RecursionError:
        raise PolicyError("", "it is nested too deeply") from None


def _strings(where: str, value: Any, max_items: int, max_bytes: int) -> List[str]:
    if not isinstance(value, list):
        raise PolicyError(where, "must be a list of strings")
    if len(value) > max_items:
        raise PolicyError(where, f"has {len(value)} entries; the limit is {max_items}")
    for index, entry in enumerate(value):
        if not isinstance(entry, str):
            raise PolicyError(f"{where}[{index}]", "must be a string")
        if len(entry.encode("utf-8")) > max_bytes:
            raise PolicyError(f"{where}[{index}]", f"is longer than {max_bytes} bytes")
    return value


def _check_action(where: str, action: Any) -> None:
    if not isinstance(action, dict):
        raise PolicyError(where, "an action must be a mapping with 'type' and 'config'")
    for key in action:
        if key not in ACTION_KEYS:
            raise PolicyError(where, f"unknown key '{key}'; accepted: type, config")
    kind = action.get("type")
    if not isinstance(kind, str) or not kind.strip():
        raise PolicyError(f"{where}.type", "must be a non-empty string")
    config = action.get("config")
    if config is not None and not isinstance(config, dict):
        raise PolicyError(f"{where}.config", "must be a mapping")


def _check_rule(where: str, rule: Any) -> None:
    if not isinstance(rule, dict):
        raise PolicyError(
            where, "a rule must be a mapping with 'name', 'expressions' and 'actions'"
        )
    for key in rule:
        if key not in RULE_KEYS:
            raise PolicyError(where, f"unknown key '{key}'; accepted: {', '.join(RULE_KEYS)}")
    name = rule.get("name")
    if name is not None and (
        not isinstance(name, str) or len(name.encode("utf-8")) > MAX_NAME_BYTES
    ):
        raise PolicyError(f"{where}.name", f"must be a string of at most {MAX_NAME_BYTES} bytes")
    if rule.get("expressions") is not None:
        _strings(
            f"{where}.expressions", rule["expressions"], MAX_EXPRESSIONS, MAX_EXPRESSION_BYTES
        )
    actions = rule.get("actions")
    if not isinstance(actions, list) or not actions:
        raise PolicyError(f"{where}.actions", "every rule needs a non-empty list of actions")
    if len(actions) > MAX_ACTIONS:
        raise PolicyError(
            f"{where}.actions", f"has {len(actions)} actions; the limit is {MAX_ACTIONS}"
        )
    for index, action in enumerate(actions):
        _check_action(f"{where}.actions[{index}]", action)


def check_shape(document: Any) -> dict:
    """The document as a dict of phases, or PolicyError naming the first broken element."""
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise PolicyError(
            "",
            f"the top level must be a mapping of phases ({', '.join(PHASES)}) to lists of rules",
        )
    for phase, rules in document.items():
        if phase not in PHASES:
            raise PolicyError(
                "", f"unknown phase '{str(phase)[:64]}'; accepted: {', '.join(PHASES)}"
            )
        if rules is None:
            continue
        if not isinstance(rules, list):
            raise PolicyError(phase, "must be a list of rules")
        if len(rules) > MAX_RULES_PER_PHASE:
            raise PolicyError(phase, f"has {len(rules)} rules; the limit is {MAX_RULES_PER_PHASE}")
        for index, rule in enumerate(rules):
            _check_rule(f"{phase}[{index}]", rule)
    return document


def rules(document: dict, phase: str) -> Iterator[Tuple[int, dict]]:
    return enumerate(document.get(phase) or [])
