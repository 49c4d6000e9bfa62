"""on_event_stream_message and sse-find-replace sans-IO: cutting a stream into messages (every
line end, a CR at a piece's end, the per-message bound at the byte), a message's fields and
how it is written back, the action's config at each rule, and what it does per message."""

import pytest

from chalicelib.core.policy import PolicyError, Response, sse
from tests.support.policy import compile_doc, conn, request, rule

PHASE = "on_event_stream_message"
A0 = f"{PHASE}[0].actions[0].config"


def sfr(*replacements):
    return {"type": "sse-find-replace", "config": {"replacements": list(replacements)}}


def doc(*acts, phase=PHASE):
    return {phase: [rule(*acts)]}


def refused(d) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        compile_doc(d)
    return info.value


def run(p, raw, state=None, res=None):
    message = sse.Message(raw)
    out = p.on_event_stream_message(
        conn(),
        request(),
        res or Response(status_code=200, headers=[("content-type", "text/event-stream")]),
        state or p.new_state(),
        message,
    )
    return message, out


@pytest.mark.parametrize(
    "pieces, messages, rest",
    [
        ([b"data: a\n\ndata: b\n\n"], [b"data: a\n\n", b"data: b\n\n"], b""),
        ([b"data: a\r\n\r\nda", b"ta: b\r\rx"], [b"data: a\r\n\r\n", b"data: b\r\r"], b"x"),
        ([b"data: a\n", b"\ndata: b"], [b"data: a\n\n"], b"data: b"),
        # a CR at a piece's end may be half of a CRLF: the message waits for the next byte
        ([b"data: a\r\n\r"], [], b"data: a\r\n\r"),
        ([b"data: a\r\n\r", b"\nx"], [b"data: a\r\n\r\n"], b"x"),
        ([b": comment\nid: 1\n\n"], [b": comment\nid: 1\n\n"], b""),
    ],
)
def test_a_stream_is_cut_at_each_blank_line(pieces, messages, rest):
    splitter = sse.Splitter()
    got = [m for piece in pieces for m in splitter.feed(piece)]
    assert got == messages and splitter.finish() == rest


def test_a_message_of_the_bound_passes_and_one_byte_more_is_refused_whole_or_in_pieces():
    at = b"data: " + b"x" * (256 * 1024 - 8) + b"\n\n"  # 256 KiB, its blank line counted
    assert sse.Splitter().feed(at) == [at]
    with pytest.raises(sse.TooLarge):
        sse.Splitter().feed(b"data: x" + at[6:])  # complete, one byte over
    splitter = sse.Splitter()
    splitter.feed(at[: 256 * 1024 - 2])  # incomplete, within the bound: held
    with pytest.raises(sse.TooLarge):
        sse.Splitter().feed(b"y" * (256 * 1024 + 1))  # incomplete, one over


def test_fields_read_as_the_format_says_and_an_unchanged_message_goes_on_as_it_came():
    raw = b"event: up\r\ndata:no space\r\ndata:  two spaces\r\n:comment\r\nretry: 10\r\nretry: 20\r\n\r\n"
    m = sse.Message(raw)
    assert m.field(b"data") == b"no space\n two spaces"
    assert m.field(b"retry") == b"20" and m.field(b"id") is None
    m.set_field(b"data", b"no space\n two spaces")  # the same value: nothing changed
    assert m.to_bytes() == raw


def test_a_changed_message_keeps_its_other_lines_in_place():
    m = sse.Message(b"id: 7\ndata: a\n: note\ndata: b\nevent: e\n\n")
    m.set_field(b"data", b"x\ny\nz")
    assert m.to_bytes() == b"id: 7\ndata: x\ndata: y\ndata: z\n: note\nevent: e\n\n"


@pytest.mark.parametrize(
    "action, path, words",
    [
        ({"type": "sse-find-replace"}, f"{A0}.replacements", "is required"),
        (sfr(), f"{A0}.replacements", "at least 1"),
        (sfr(*[{"from": "a"}] * 33), f"{A0}.replacements", "the limit is 32"),
        (sfr({"to": "x"}), f"{A0}.replacements[0].from", "is required"),
        (sfr({"from": ""}), f"{A0}.replacements[0].from", "must not be empty"),
        (sfr({"from": "("}), f"{A0}.replacements[0].from", "not a valid regular expression"),
        (sfr({"from": "(?=a)"}), f"{A0}.replacements[0].from", "not a valid regular expression"),
        (sfr({"from": "a", "field": "event"}), f"{A0}.replacements[0].field", "data or retry"),
        (sfr({"from": "a", "fields": "data"}), f"{A0}.replacements[0].fields", "unknown field"),
        (sfr("a"), f"{A0}.replacements[0]", "must be a mapping"),
    ],
)
def test_configs_are_refused_at_the_element(action, path, words):
    error = refused(doc(action))
    assert error.path == path and words in error.message, error


def test_it_runs_in_its_phase_only_and_the_phase_only_on_http_endpoints():
    error = refused(doc(sfr({"from": "a"}), phase="on_http_response"))
    assert "runs in on_event_stream_message" in error.message
    error = refused(doc({"type": "add-headers", "config": {"headers": {"a": "b"}}}))
    assert "cannot run in on_event_stream_message" in error.message
    p = compile_doc(doc(sfr({"from": "a"})))
    with pytest.raises(PolicyError, match="run only on_tcp_connect"):
        p.check_protocol("tcp")
    assert p.check_protocol("http") is p


def test_rules_run_in_order_on_their_fields_and_the_variables_name_what_matched():
    p = compile_doc(
        doc(
            sfr(
                {"from": "(\\d{3})-(\\d{4})", "to": "***-$2"},
                {"field": "retry", "from": "\\d+", "to": "5000"},
                {"from": "absent"},
                {"from": "\\*+", "to": "[$0 at ${res.status_code}]"},
            ),
            sfr(
                {
                    "from": "line",
                    "to": "${string(size(actions.ngrok.sse_find_replace.replacements))}",
                }
            ),
        )
    )
    message, out = run(p, b"retry: 10\ndata: call 555-1234\ndata: line\n\n")
    assert message.to_bytes() == b"retry: 5000\ndata: call [*** at 200]-1234\ndata: 3\n\n"
    assert out.errors == []


def test_the_variables_are_the_last_messages_only():
    p = compile_doc(
        doc(
            sfr({"from": "a+"}),
            sfr(
                {
                    "from": "n",
                    "to": "${actions.ngrok.sse_find_replace.replacements.map(r, r.matched_content).join(',')}",
                }
            ),
        )
    )
    state = p.new_state()
    first, _ = run(p, b"data: aaa n\n\n", state)
    # "aaa" deleted; the second action reads what the first matched
    assert first.to_bytes() == b"data:  aaa\n\n"
    second, _ = run(p, b"data: n\n\n", state)  # nothing matched in this message
    assert second.to_bytes() == b"data: \n\n"


def test_a_field_or_pattern_made_by_cel_that_is_not_valid_skips_its_rule():
    p = compile_doc(
        doc(
            sfr(
                {"field": "${res.headers['x-field'][0]}", "from": "a", "to": "b"},
                {"from": "${res.headers['x-re'][0]}", "to": "c"},
                {"from": "z", "to": "y"},
            )
        )
    )
    res = Response(status_code=200, headers=[("x-field", "event"), ("x-re", "(")])
    message, out = run(p, b"data: a z\n\n", res=res)
    assert message.to_bytes() == b"data: a y\n\n"
    assert any("field 'event' is not data or retry" in e for e in out.errors)
    assert any("not a valid regular expression" in e for e in out.errors)


def test_a_message_without_the_field_is_left_as_it_came():
    p = compile_doc(doc(sfr({"field": "retry", "from": "\\d+", "to": "1"})))
    message, _ = run(p, b"data: 10\r\n\r\n")
    assert message.to_bytes() == b"data: 10\r\n\r\n"


def test_a_rewrite_is_built_within_its_bound_at_the_byte():
    from chalicelib.core.policy import actions

    regex = actions._bytes_regex("a", "from")
    twice = actions._bytes_replacement("$0$0")
    assert actions.bounded_sub(regex, twice, b"xaax", 6) == b"xaaaax"
    with pytest.raises(actions.RewriteTooLarge, match="longer than 5 bytes"):
        actions.bounded_sub(regex, twice, b"xaax", 5)
    empty = actions._bytes_regex("b*", "from")
    assert actions.bounded_sub(empty, actions._bytes_replacement("-"), b"xy", 10) == b"-x-y-"


def test_a_message_a_rule_would_grow_past_the_bound_ends_the_stream():
    p = compile_doc(doc(sfr({"from": "a", "to": "$0" * 1000})))
    small, _ = run(p, b"data: " + b"a" * 100 + b"\n\n")  # 100 KB: within 256 KiB
    assert len(small.field(b"data")) == 100 * 1000
    with pytest.raises(sse.TooLarge, match="longer than 262144 bytes"):
        run(p, b"data: " + b"a" * 300 + b"\n\n")  # 300 KB: past it
