"""Validation of traffic policy documents (``traffic_policy.value`` of edges).

A document is a JSON or YAML string whose top level is a mapping from phases to lists of
rules. The phases are ``on_tcp_connect``, ``on_http_request`` and ``on_http_response``.
Each rule is a mapping with:
- ``name``: optional string (at most 255 bytes);
- ``expressions``: optional list of strings (the conditions; at most 32, each at most 1024
  bytes; their CEL syntax is not checked here);
- ``actions``: required, non-empty list (at most 32) of ``{type, config}``: ``type`` a
  non-empty string, ``config`` an optional mapping.
Any other key, at any level, is a 400 naming where it is. The document as a whole is at
most 16384 bytes and may hold at most 64 rules per phase. The stored value is the string
exactly as sent; an empty document (no phases) is allowed and means "no rules".
"""
import json
from typing import Any, List

from chalicelib import errors

PHASES = ("on_tcp_connect", "on_http_request", "on_http_response")
MAX_DOCUMENT_BYTES = 16384
MAX_RULES_PER_PHASE = 64
MAX_EXPRESSIONS = 32
MAX_ACTIONS = 32
MAX_EXPRESSION_BYTES = 1024
MAX_NAME_BYTES = 255
RULE_KEYS = ("name", "expressions", "actions")
ACTION_KEYS = ("type", "config")


def _bad(field: str, where: str, msg: str) -> errors.InvalidField:
    location = f" at {where}" if where else ""
    return errors.InvalidField(f"Field '{field}' is not a valid traffic policy{location}: {msg}",
                               details={"field": field})


def _parse(field: str, text: str) -> Any:
    # Both parsers recurse once per nesting level: '[[[[…' within the size limit exhausts
    # Python's stack (RecursionError), which is the caller's bad input, not a crash.
    too_deep = _bad(field, "", "it is nested too deeply")
    try:
        return json.loads(text)
    except ValueError:
        pass
    except RecursionError:
        raise too_deep from None
    import yaml  # here, not at the top: ~11 ms of every cold start, needed only for YAML
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _bad(field, "", f"it is neither JSON nor YAML ({str(exc).splitlines()[0]})") \
            from None
    except RecursionError:
        raise too_deep from None


def _strings(field: str, where: str, value: Any, max_items: int, max_bytes: int) -> List[str]:
    if not isinstance(value, list):
        raise _bad(field, where, "must be a list of strings")
    if len(value) > max_items:
        raise _bad(field, where, f"has {len(value)} entries; the limit is {max_items}")
    for index, entry in enumerate(value):
        if not isinstance(entry, str):
            raise _bad(field, f"{where}[{index}]", "must be a string")
        if len(entry.encode("utf-8")) > max_bytes:
            raise _bad(field, f"{where}[{index}]", f"is longer than {max_bytes} bytes")
    return value


def _check_action(field: str, where: str, action: Any) -> None:
    if not isinstance(action, dict):
        raise _bad(field, where, "an action must be a mapping with 'type' and 'config'")
    for key in action:
        if key not in ACTION_KEYS:
            raise _bad(field, where, f"unknown key '{key}'; accepted: type, config")
    kind = action.get("type")
    if not isinstance(kind, str) or not kind.strip():
        raise _bad(field, f"{where}.type", "must be a non-empty string")
    config = action.get("config")
    if config is not None and not isinstance(config, dict):
        raise _bad(field, f"{where}.config", "must be a mapping")


def _check_rule(field: str, where: str, rule: Any) -> None:
    if not isinstance(rule, dict):
        raise _bad(field, where, "a rule must be a mapping with 'name', 'expressions' and "
                                 "'actions'")
    for key in rule:
        if key not in RULE_KEYS:
            raise _bad(field, where, f"unknown key '{key}'; accepted: "
                                     f"{', '.join(RULE_KEYS)}")
    name = rule.get("name")
    if name is not None and (not isinstance(name, str)
                             or len(name.encode("utf-8")) > MAX_NAME_BYTES):
        raise _bad(field, f"{where}.name", f"must be a string of at most {MAX_NAME_BYTES} bytes")
    if rule.get("expressions") is not None:
        _strings(field, f"{where}.expressions", rule["expressions"], MAX_EXPRESSIONS,
                 MAX_EXPRESSION_BYTES)
    actions = rule.get("actions")
    if not isinstance(actions, list) or not actions:
        raise _bad(field, f"{where}.actions", "every rule needs a non-empty list of actions")
    if len(actions) > MAX_ACTIONS:
        raise _bad(field, f"{where}.actions", f"has {len(actions)} actions; the limit is "
                                              f"{MAX_ACTIONS}")
    for index, action in enumerate(actions):
        _check_action(field, f"{where}.actions[{index}]", action)


def check_document(field: str, text: Any) -> str:
    """``text`` if it is a valid policy document; a 400 naming ``field`` and the place."""
    if not isinstance(text, str):
        raise errors.InvalidField(f"Field '{field}' must be a string holding a JSON or YAML "
                                  "traffic policy document", details={"field": field})
    size = len(text.encode("utf-8"))
    if size > MAX_DOCUMENT_BYTES:
        raise _bad(field, "", f"it is {size} bytes; the limit is {MAX_DOCUMENT_BYTES} bytes")
    document = _parse(field, text)
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise _bad(field, "", "the top level must be a mapping of phases ("
                              f"{', '.join(PHASES)}) to lists of rules")
    for phase, rules in document.items():
        if phase not in PHASES:
            raise _bad(field, "", f"unknown phase '{str(phase)[:64]}'; accepted: "
                                  f"{', '.join(PHASES)}")
        if rules is None:
            continue
        if not isinstance(rules, list):
            raise _bad(field, phase, "must be a list of rules")
        if len(rules) > MAX_RULES_PER_PHASE:
            raise _bad(field, phase, f"has {len(rules)} rules; the limit is "
                                     f"{MAX_RULES_PER_PHASE}")
        for index, rule in enumerate(rules):
            _check_rule(field, f"{phase}[{index}]", rule)
    return text
