"""Compiled policies and running a phase."""

import hashlib
import json
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from chalicelib.core.policy import actions as actions_mod
from chalicelib.core.policy import celenv, document, secrets
from chalicelib.core.policy.document import PHASES, PolicyError
from chalicelib.core.policy.model import Conn, Request, Response
from chalicelib.core.policy.outcome import (
    FORWARD_INTERNAL,
    HTTP_REQUEST,
    IDENTITY,
    NEED_BODY,
    TERMINATE_TLS,
    Outcome,
)

CACHE_SIZE = 256
HTTP_PHASES = PHASES[1:]


class Rule:
    __slots__ = ("name", "expressions", "actions")

    def __init__(self, name, expressions, actions):
        self.name = name
        self.expressions = expressions
        self.actions = actions


class State:
    """What one request (or, for on_tcp_connect, one connection) carries between calls:
    ``vars`` and action result variables per phase (each phase sees only its own, as the
    hosted docs scope them), and where a paused phase resumes."""

    __slots__ = ("vars", "action_vars", "resume", "http_requests")

    def __init__(self) -> None:
        self.vars: Dict[str, Dict[str, Any]] = {p: {} for p in PHASES}
        self.action_vars: Dict[str, Dict[str, Any]] = {p: {} for p in PHASES}
        self.resume: Dict[str, Tuple[int, int, str]] = {}
        self.http_requests = 0  # http-request actions run for this request (both phases)

    def http_request_done(self, phase: str, values: Dict[str, Any]) -> None:
        """The answer to an http-request call (httpcall.result_vars), as that phase's
        ``actions.ngrok.http_request.*`` variables; the phase then resumes after the action."""
        for key, value in values.items():
            self.action_vars[phase][f"actions.ngrok.http_request.{key}"] = value


class Policy:
    """A compiled policy document. Immutable and shared: one per document digest."""

    def __init__(self, doc: dict, digest: str) -> None:
        self.digest = digest
        self.phases: Dict[str, List[Rule]] = {}
        self.request_body_limit = 0
        # Every restrict-ips ``ip_policies`` entry as (its path in the document, the id): the
        # API checks them against the account, the edge resolves ``ip_policy_ids`` per run.
        self.ip_policy_refs: List[Tuple[str, str]] = []
        # Every literal ${secrets.get('vault', 'name')} as (path, vault, name): the API checks
        # them against the account, the edge resolves them per run (conn.secret_resolver).
        self.secret_refs: List[Tuple[str, str, str]] = []
        for phase in PHASES:
            compiled = []
            for index, rule in document.rules(doc, phase):
                where = f"{phase}[{index}]"
                expressions = []
                for e_index, text in enumerate(rule.get("expressions") or []):
                    try:
                        expressions.append(celenv.compile_expression(text, phase))
                    except celenv.CelError as exc:
                        raise PolicyError(
                            f"{where}.expressions[{e_index}]", f"bad CEL: {exc}"
                        ) from None
                built = []
                for a_index, action in enumerate(rule["actions"]):
                    a_where = f"{where}.actions[{a_index}]"
                    act = actions_mod.build(action, a_where, phase)
                    self.secret_refs.extend(
                        secrets.refs_in(action.get("config"), f"{a_where}.config")
                    )
                    if isinstance(act, actions_mod.RateLimit):
                        act.scope = f"{digest}:{a_where}:{act.name}"
                    if isinstance(act, actions_mod.CircuitBreaker):
                        act.scope = f"{digest}:{a_where}"
                    if isinstance(act, actions_mod.RestrictIps):
                        self.ip_policy_refs.extend(
                            (f"{a_where}.config.ip_policies[{i}]", ident)
                            for i, ident in enumerate(act.ip_policies)
                        )
                    self.request_body_limit = max(self.request_body_limit, act.needs_body)
                    built.append(act)
                compiled.append(Rule(rule.get("name") or "", expressions, built))
            self.phases[phase] = compiled
        self.ip_policy_ids: Tuple[str, ...] = tuple(sorted({i for _, i in self.ip_policy_refs}))
        # on_tcp_connect reads the client certificate (conn.tls.client.*): a TLS endpoint the
        # edge terminates by its Bind option makes its handshake before running the phase
        self.tcp_reads_tls_client = "conn.tls.client" in json.dumps(
            [rule for _, rule in document.rules(doc, "on_tcp_connect")], default=str
        )
        self.clock: Callable[[], float] = time.time

    def check_protocol(self, protocol: str) -> "Policy":
        """PolicyError when the document has phases an endpoint of ``protocol`` never runs
        (the hosted docs' "Phases available by protocol": TCP and TLS endpoints run only
        on_tcp_connect); else the policy itself."""
        http = protocol in ("http", "https")
        for rule_index, rule in enumerate(self.phases.get("on_tcp_connect") or []):
            for index, act in enumerate(rule.actions):
                if isinstance(act, actions_mod.TerminateTls) and protocol != "tls":
                    why = (  # applied to TLS endpoints and TLS edges here
                        "terminate-tls runs on TLS endpoints and TLS edges here, "
                        f"not on {protocol} ones"
                    )
                elif isinstance(act, actions_mod.ForwardInternal) and http:
                    why = (  # an HTTP endpoint forwards its requests
                        "forward-internal in on_tcp_connect runs on TCP and TLS endpoints; "
                        f"a {protocol} endpoint forwards its requests in on_http_request"
                    )
                else:
                    continue
                raise PolicyError(f"on_tcp_connect[{rule_index}].actions[{index}].type", why)
        if protocol in ("tcp", "tls"):
            for phase in HTTP_PHASES:
                if self.phases.get(phase):
                    raise PolicyError(
                        phase,
                        f"{protocol} endpoints run only on_tcp_connect; {phase} would never run",
                    )
        return self

    def has(self, phase: str) -> bool:
        return bool(self.phases.get(phase))

    def new_state(self) -> State:
        return State()

    # -- the three phases -------------------------------------------------------------------
    def on_tcp_connect(self, conn: Conn, state: Optional[State] = None) -> Outcome:
        return self._run("on_tcp_connect", conn, None, None, state or State())

    def on_http_request(self, conn: Conn, req: Request, state: State) -> Outcome:
        return self._run("on_http_request", conn, req, None, state)

    def on_http_response(self, conn: Conn, req: Request, res: Response, state: State) -> Outcome:
        return self._run("on_http_response", conn, req, res, state)

    def on_event_stream_message(
        self, conn: Conn, req: Request, res: Response, state: State, message: Any
    ) -> Outcome:
        """One message (sse.Message) of a text/event-stream response: the actions change it
        in place; its variables are the message's own (reset for each)."""
        phase = "on_event_stream_message"
        state.vars[phase] = {}
        state.action_vars[phase] = {}
        return self._run(phase, conn, req, res, state, message)

    def _run(self, phase, conn, req, res, state: State, message: Any = None) -> Outcome:
        outcome = Outcome(message=message)
        rules = self.phases.get(phase)
        if not rules:
            return outcome
        traffic = celenv.Traffic(conn, req, res, state.vars[phase], state.action_vars[phase])
        run = actions_mod.Run(traffic, phase, outcome, self.clock, state)
        start_rule, start_action, skip_expressions = 0, 0, False
        resume = state.resume.pop(phase, None)
        if resume is not None:
            start_rule, start_action, reason = resume
            skip_expressions = True
            if reason in (FORWARD_INTERNAL, IDENTITY, HTTP_REQUEST, TERMINATE_TLS):
                start_action += 1  # the forward failed and on_error is continue, the
                # visitor is signed in (edge/identity.py), or the http-request call was
                # made (its variables set): go on after the action
        for r_index in range(start_rule, len(rules)):
            rule = rules[r_index]
            first_action = 0
            if skip_expressions and r_index == start_rule:
                first_action = start_action
            elif not self._matches(rule, traffic, outcome):
                continue
            for a_index in range(first_action, len(rule.actions)):
                result = rule.actions[a_index].run(run)
                if result is None:
                    continue
                result.logs = outcome.logs
                result.errors = outcome.errors
                result.compressor = outcome.compressor
                result.rewrites = outcome.rewrites
                result.body_checks = outcome.body_checks
                result.breakers = outcome.breakers
                if result.kind == NEED_BODY:
                    state.resume[phase] = (r_index, a_index, NEED_BODY)
                elif result.kind == IDENTITY:
                    state.resume[phase] = (r_index, a_index, IDENTITY)
                elif result.kind == HTTP_REQUEST:
                    state.resume[phase] = (r_index, a_index, HTTP_REQUEST)
                elif result.kind == TERMINATE_TLS:
                    state.resume[phase] = (r_index, a_index, TERMINATE_TLS)
                elif result.kind == FORWARD_INTERNAL and result.on_error == "continue":
                    state.resume[phase] = (r_index, a_index, FORWARD_INTERNAL)
                return result
        return outcome

    @staticmethod
    def _matches(rule: Rule, traffic, outcome: Outcome) -> bool:
        for program in rule.expressions:
            try:
                if program.evaluate(traffic) is not True:
                    return False
            except celenv.EvalError as exc:
                outcome.errors.append(f"expression {program.text!r}: {exc}")
                return False
        return True


_cache: "OrderedDict[str, Policy]" = OrderedDict()
_cache_lock = threading.Lock()


def _text_and_digest(doc: Union[str, dict, None]) -> Tuple[Any, str]:
    if isinstance(doc, str):
        return doc, hashlib.sha256(doc.encode("utf-8")).hexdigest()
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return doc, hashlib.sha256(text.encode("utf-8")).hexdigest()


def compile_policy(doc: Union[str, dict, None]) -> Policy:
    """The compiled policy for ``doc`` (JSON or YAML text, or the parsed mapping).

    Raises PolicyError naming the first element that is wrong. Compiled policies are kept
    per document digest (sha256 of the text), CACHE_SIZE of them, so the edge can call this
    per connection at the cost of one hash."""
    if doc is None:
        doc = {}
    source, digest = _text_and_digest(doc)
    with _cache_lock:
        hit = _cache.get(digest)
        if hit is not None:
            _cache.move_to_end(digest)
            return hit
    if isinstance(source, str):
        parsed = document.parse(source)
    else:
        parsed = source
        size = len(json.dumps(parsed, default=str).encode("utf-8"))
        if size > document.MAX_DOCUMENT_BYTES:
            raise PolicyError(
                "", f"it is {size} bytes; the limit is {document.MAX_DOCUMENT_BYTES} bytes"
            )
    policy = Policy(document.check_shape(parsed), digest)
    with _cache_lock:
        _cache[digest] = policy
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return policy
