"""An agent's TrafficPolicy option goes through the engine's one document parser: its size
limit and nesting guard hold at the bind as they do in the API (ERR_NGROK_2201, never a crash)."""

import pytest

from chalicelib.core import binding, edge_errors
from chalicelib.core.policy.document import MAX_DOCUMENT_BYTES
from edge import enforce


def _refusal(text):
    with pytest.raises(binding.Refused) as caught:
        enforce.parse_document(text)
    assert caught.value.code == edge_errors.INVALID_TRAFFIC_POLICY
    return caught.value.message


def _sized(size: int) -> str:
    head = '{"on_http_request": [], "x": "'
    return head + "a" * (size - len(head) - 2) + '"}'


def test_a_document_at_the_size_limit_parses_and_one_byte_over_is_refused():
    assert set(enforce.parse_document(_sized(MAX_DOCUMENT_BYTES))) == {"on_http_request", "x"}
    assert f"the limit is {MAX_DOCUMENT_BYTES} bytes" in _refusal(_sized(MAX_DOCUMENT_BYTES + 1))


@pytest.mark.parametrize("text", ["[" * 5000, '{"a": ' * 2500], ids=["lists", "objects"])
def test_a_deeply_nested_document_is_refused_not_a_crash(text):
    message = _refusal(text)
    assert "nested too deeply" in message or "neither JSON nor YAML" in message


@pytest.mark.parametrize(
    "text, why",
    [
        ("- a\n- b", "mapping of phases"),
        ("{a: [", "neither JSON nor YAML"),
        (42, "JSON or YAML document"),
    ],
)
def test_what_is_not_a_mapping_of_phases_is_refused_saying_why(text, why):
    assert why in _refusal(text)


def test_yaml_and_an_already_parsed_mapping_are_accepted():
    assert enforce.parse_document("on_http_request: []") == {"on_http_request": []}
    assert enforce.parse_document({"on_tcp_connect": []}) == {"on_tcp_connect": []}
