"""chalicelib.core.policy.document, where the shape and size rules of a traffic policy live: each
refusal's path (the element) and message (the rule), and each limit at its boundary. The API
turns them into "Field 'F' is not a valid traffic policy at PATH: MESSAGE" (last test)."""

import json

import pytest

from chalicelib import traffic_policy
from chalicelib.core import errors
from chalicelib.core.policy import document
from chalicelib.core.policy.document import PolicyError

A = {"type": "deny"}


def _refused(value):
    with pytest.raises(PolicyError) as info:
        if isinstance(value, str):
            document.check_shape(document.parse(value))
        else:
            document.check_shape(value)
    return info.value.path, info.value.message


@pytest.mark.parametrize(
    "doc, path, message",
    [
        (
            [1],
            "",
            "the top level must be a mapping of phases (on_tcp_connect, on_http_request, "
            "on_http_response, on_event_stream_message) to lists of rules",
        ),
        (
            {"on_x": []},
            "",
            "unknown phase 'on_x'; accepted: on_tcp_connect, on_http_request, on_http_response, "
            "on_event_stream_message",
        ),
        (
            {"p" * 100: []},
            "",
            f"unknown phase '{'p' * 64}'; accepted: on_tcp_connect, "
            "on_http_request, on_http_response, on_event_stream_message",
        ),
        ({"on_tcp_connect": {}}, "on_tcp_connect", "must be a list of rules"),
        (
            {"on_tcp_connect": [{"actions": [A]}] * 65},
            "on_tcp_connect",
            "has 65 rules; the limit is 64",
        ),
        (
            {"on_http_request": [{"actions": [A]}, 5]},
            "on_http_request[1]",
            "a rule must be a mapping with 'name', 'expressions' and 'actions'",
        ),
        (
            {"on_http_request": [{"actions": [A], "when": 1}]},
            "on_http_request[0]",
            "unknown key 'when'; accepted: name, expressions, actions",
        ),
        (
            {"on_http_request": [{"name": 5, "actions": [A]}]},
            "on_http_request[0].name",
            "must be a string of at most 255 bytes",
        ),
        (
            {"on_http_request": [{"name": "é" * 128, "actions": [A]}]},
            "on_http_request[0].name",
            "must be a string of at most 255 bytes",
        ),
        (
            {"on_http_request": [{"expressions": "true", "actions": [A]}]},
            "on_http_request[0].expressions",
            "must be a list of strings",
        ),
        (
            {"on_http_request": [{"expressions": ["true"] * 33, "actions": [A]}]},
            "on_http_request[0].expressions",
            "has 33 entries; the limit is 32",
        ),
        (
            {"on_http_request": [{"expressions": ["true", 1], "actions": [A]}]},
            "on_http_request[0].expressions[1]",
            "must be a string",
        ),
        (
            {"on_http_request": [{"expressions": ["true", "é" * 513], "actions": [A]}]},
            "on_http_request[0].expressions[1]",
            "is longer than 1024 bytes",
        ),
        (
            {"on_http_request": [{"name": "n"}]},
            "on_http_request[0].actions",
            "every rule needs a non-empty list of actions",
        ),
        (
            {"on_http_request": [{"actions": {}}]},
            "on_http_request[0].actions",
            "every rule needs a non-empty list of actions",
        ),
        (
            {"on_http_request": [{"actions": [A] * 33}]},
            "on_http_request[0].actions",
            "has 33 actions; the limit is 32",
        ),
        (
            {"on_http_request": [{"actions": [A, "deny"]}]},
            "on_http_request[0].actions[1]",
            "an action must be a mapping with 'type' and 'config'",
        ),
        (
            {"on_http_request": [{"actions": [{"type": "deny", "with": 1}]}]},
            "on_http_request[0].actions[0]",
            "unknown key 'with'; accepted: type, config",
        ),
        (
            {"on_http_request": [{"actions": [{"type": " "}]}]},
            "on_http_request[0].actions[0].type",
            "must be a non-empty string",
        ),
        (
            {"on_http_request": [{"actions": [{"type": 5}]}]},
            "on_http_request[0].actions[0].type",
            "must be a non-empty string",
        ),
        (
            {"on_http_request": [{"actions": [{"type": "deny", "config": [1]}]}]},
            "on_http_request[0].actions[0].config",
            "must be a mapping",
        ),
    ],
)
def test_a_refused_shape_names_the_element_and_the_rule(doc, path, message):
    assert _refused(doc) == (path, message)


def test_shapes_at_the_limits_pass():
    rule = {"name": "é" * 127 + "n", "expressions": ["é" * 512] * 32, "actions": [A] * 32}
    doc = {
        "on_tcp_connect": [rule] * 64,
        "on_http_request": None,
        "on_http_response": [{"actions": [{"type": "deny", "config": None}]}],
    }
    assert document.check_shape(doc) is doc
    assert document.check_shape(None) == {}
    assert list(document.rules(doc, "on_tcp_connect"))[63] == (63, rule)
    assert list(document.rules(doc, "on_http_request")) == []
    assert list(document.rules({}, "on_tcp_connect")) == []


def test_a_document_of_16384_bytes_parses_and_one_more_is_refused_with_its_size():
    head = '{"on_tcp_connect": [], "x": "'
    text = head + "é" * ((16384 - len(head) - 2) // 2) + '"}'
    text = text[:-2] + "a" * (16384 - len(text.encode())) + '"}'
    assert len(text.encode()) == 16384
    assert document.parse(text)["on_tcp_connect"] == []
    with pytest.raises(PolicyError) as info:
        document.parse(text[:-2] + 'a"}')
    assert (info.value.path, info.value.message) == (
        "",
        "it is 16385 bytes; the limit is 16384 bytes",
    )


def test_json_and_yaml_parse_and_other_text_says_why():
    assert document.parse('{"on_tcp_connect": []}') == {"on_tcp_connect": []}
    assert document.parse("on_tcp_connect: []") == {"on_tcp_connect": []}
    assert document.parse("") is None
    with pytest.raises(PolicyError) as info:
        document.parse("a: [b")
    assert info.value.path == ""
    assert info.value.message.startswith("it is neither JSON nor YAML (")
    assert "\n" not in info.value.message and info.value.message.endswith(")")
    for deep in ("[" * 16000, "a: " + "[" * 5000):
        with pytest.raises(PolicyError) as info:
            document.parse(deep)
        assert (info.value.path, info.value.message) == ("", "it is nested too deeply")


def test_a_policy_error_reads_as_its_path_and_message():
    assert str(PolicyError("a[0]", "bad")) == "a[0]: bad"
    assert str(PolicyError("", "bad")) == "bad"


def test_the_api_names_the_field_the_element_and_the_rule():
    doc = json.dumps({"on_http_request": [{"actions": [A] * 33}]})
    with pytest.raises(errors.InvalidField) as info:
        traffic_policy.check_document("traffic_policy.value", doc)
    assert info.value.msg == (
        "Field 'traffic_policy.value' is not a valid traffic policy at "
        "on_http_request[0].actions: has 33 actions; the limit is 32"
    )
    assert info.value.details == {"field": "traffic_policy.value"}
    with pytest.raises(errors.InvalidField) as info:
        traffic_policy.check_document("v", "[1]")
    assert info.value.msg.startswith("Field 'v' is not a valid traffic policy: the top level")
    with pytest.raises(errors.InvalidField) as info:
        traffic_policy.check_document("v", {"on_tcp_connect": []})
    assert info.value.msg == (
        "Field 'v' must be a string holding a JSON or YAML traffic policy document"
    )
    assert info.value.details == {"field": "v"}


def test_a_tcp_document_refuses_http_phases_naming_the_phase():
    doc = json.dumps({"on_http_request": [{"actions": [A]}]})
    assert traffic_policy.check_document("v", doc) == doc
    with pytest.raises(errors.InvalidField) as info:
        traffic_policy.check_tcp_document("v", doc)
    assert info.value.msg.startswith(
        "Field 'v' is not a valid traffic policy at on_http_request: "
    )
    assert info.value.details == {"field": "v"}


def test_text_that_is_neither_json_nor_yaml_gives_the_yaml_parser_s_first_line():
    with pytest.raises(PolicyError) as info:
        document.parse("a: [b")
    assert info.value.message == "it is neither JSON nor YAML (while parsing a flow sequence)"


def test_a_phase_without_rules_does_not_stop_the_check_of_the_next_phases():
    assert _refused({"on_tcp_connect": None, "on_x": []})[1].startswith("unknown phase 'on_x'")
    assert _refused({"on_tcp_connect": None, "on_http_request": [5]})[0] == "on_http_request[0]"


# ---- restrict-ips' ip_policies must be the caller's (traffic_policy.check_ip_policies) ----------
def _restrict(*policy_ids):
    return json.dumps(
        {
            "on_http_request": [
                {
                    "actions": [
                        {"type": "restrict-ips", "config": {"ip_policies": list(policy_ids)}}
                    ]
                }
            ]
        }
    )


def _account_owns(monkeypatch, module):
    """What the account owns, as ``module.missing_of(account_id, refs)`` sees it (the refs not
    in ``owned``, each once); records each call."""
    owned, calls = set(), []

    def missing_of(account_id, refs):
        refs = list(refs)
        calls.append((account_id, refs))
        return [ref for ref in dict.fromkeys(refs) if ref not in owned]

    monkeypatch.setattr(module, "missing_of", missing_of)
    return owned, calls


@pytest.fixture
def account_policies(monkeypatch):
    """The account's IP policies (chalicelib.core.ip_rules.missing_of)."""
    from chalicelib.core import ip_rules

    return _account_owns(monkeypatch, ip_rules)


def test_a_document_naming_only_the_account_s_policies_passes(account_policies):
    from chalicelib.core import ids

    owned, calls = account_policies
    first, second = ids.new_id("ipp"), ids.new_id("ipp")
    owned.update({first, second})
    traffic_policy.check_ip_policies("acct_1", "traffic_policy.value", _restrict(first, second))
    assert calls == [("acct_1", [first, second])]


def test_documents_naming_no_policy_read_nothing(account_policies):
    owned, calls = account_policies
    for text in (None, "", json.dumps({"on_http_request": [{"actions": [A]}]})):
        traffic_policy.check_ip_policies("acct_1", "v", text)
    assert calls == []


def test_a_policy_the_account_does_not_have_is_a_400_naming_the_element(account_policies):
    from chalicelib.core import ids

    owned, calls = account_policies
    mine, other = ids.new_id("ipp"), ids.new_id("ipp")
    owned.add(mine)
    with pytest.raises(errors.InvalidField) as info:
        traffic_policy.check_ip_policies("acct_1", "traffic_policy.value", _restrict(mine, other))
    assert info.value.status_code == 400 and info.value.error_code == errors.INVALID_FIELD
    assert info.value.msg == (
        "Field 'traffic_policy.value' is not a valid traffic policy at "
        "on_http_request[0].actions[0].config.ip_policies[1]: the IP policy "
        f"'{other}' does not exist in this account"
    )
    assert info.value.details == {"field": "traffic_policy.value"}
    assert calls == [("acct_1", [mine, other])]


def test_an_unknown_policy_id_is_quoted_up_to_64_characters():
    error = traffic_policy.unknown_ip_policy("v", "p[0]", "ipp_" + "x" * 100)
    assert error.msg == (
        "Field 'v' is not a valid traffic policy at p[0]: the IP policy "
        f"'ipp_{'x' * 60}' does not exist in this account"
    )
    assert error.details == {"field": "v"}


# ---- ${secrets.get(vault, name)} must name the caller's secrets (traffic_policy.check_secrets) --
def _headers(**values):
    return json.dumps(
        {
            "on_http_request": [
                {"actions": [{"type": "add-headers", "config": {"headers": values}}]}
            ]
        }
    )


def _secret(vault, name):
    return "${secrets.get('%s', '%s')}" % (vault, name)


@pytest.fixture
def account_secrets(monkeypatch):
    """The account's (vault, secret) pairs (chalicelib.core.vault_secrets.missing_of)."""
    from chalicelib.core import vault_secrets

    return _account_owns(monkeypatch, vault_secrets)


def test_a_document_naming_only_the_account_s_secrets_passes(account_secrets):
    owned, calls = account_secrets
    owned.update({("keys", "a"), ("keys", "b")})
    text = _headers(**{"x-a": _secret("keys", "a"), "x-b": "b=" + _secret("keys", "b")})
    traffic_policy.check_secrets("acct_1", "traffic_policy.value", text)
    assert calls == [("acct_1", [("keys", "a"), ("keys", "b")])]


def test_documents_naming_no_secret_read_nothing(account_secrets):
    owned, calls = account_secrets
    for text in (None, "", _headers(**{"x-a": "plain"})):
        traffic_policy.check_secrets("acct_1", "v", text)
    assert calls == []


def test_a_secret_the_account_does_not_have_is_a_400_naming_the_element(account_secrets):
    owned, calls = account_secrets
    owned.add(("keys", "a"))
    text = _headers(**{"x-a": _secret("keys", "a"), "x-b": _secret("keys", "gone")})
    with pytest.raises(errors.InvalidField) as info:
        traffic_policy.check_secrets("acct_1", "traffic_policy.value", text)
    assert info.value.status_code == 400 and info.value.error_code == errors.INVALID_FIELD
    assert info.value.msg == (
        "Field 'traffic_policy.value' is not a valid traffic policy at "
        "on_http_request[0].actions[0].config.headers.x-b: the secret 'gone' does not exist "
        "in a vault 'keys' of this account"
    )
    assert info.value.details == {"field": "traffic_policy.value"}
    assert calls == [("acct_1", [("keys", "a"), ("keys", "gone")])]


def test_a_missing_secret_and_its_vault_are_quoted_up_to_64_characters(account_secrets):
    vault, name = "v" * 64 + "VAULT", "n" * 64 + "NAME"
    with pytest.raises(errors.InvalidField) as info:
        traffic_policy.check_secrets("acct_1", "f", _headers(**{"x-a": _secret(vault, name)}))
    assert f"the secret '{'n' * 64}' does not exist in a vault '{'v' * 64}' of" in info.value.msg


def test_the_ip_policy_check_checks_the_secrets_of_the_same_document(
    account_secrets, account_policies
):
    """check_ip_policies (what edge modules call on a policy) checks its secrets too."""
    owned, calls = account_secrets
    text = _headers(**{"x-a": _secret("keys", "gone")})
    with pytest.raises(errors.InvalidField) as info:
        traffic_policy.check_ip_policies("acct_1", "traffic_policy.value", text)
    assert info.value.details == {"field": "traffic_policy.value"}
    assert "at on_http_request[0].actions[0].config.headers.x-a: the secret" in info.value.msg
    assert calls == [("acct_1", [("keys", "gone")])]
