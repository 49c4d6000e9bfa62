"""The circuit breaker of an HTTP endpoint (the Bind option ``CircuitBreaker``: the SDKs'
``circuit_breaker(error_threshold)``) with the hosted module's fixed window (10 s, 10
buckets), volume (10) and tripped time (10 s); the breaker itself is
chalicelib/core/policy/breaker.py's, which the ``circuit-breaker`` action uses too.

``error_threshold`` must be within 0.0 to 1.0 (ERR_NGROK_361 otherwise, as hosted). Memory:
one breaker per endpoint that asked for it.
"""

from typing import Any, Optional

from chalicelib.core import binding, edge_errors
from chalicelib.core.policy.breaker import Breaker

TRIPPED_ANSWER = (
    503,
    edge_errors.CIRCUIT_BREAKER_TRIPPED,
    "Circuit breaker tripped: the endpoint's upstream answered too many 5xx "
    "responses; try again later.",
)
INVALID = edge_errors.INVALID_CIRCUIT_BREAKER


def of_option(option: Any) -> Optional[Breaker]:
    """The breaker of a ``CircuitBreaker`` Bind option (None when unset), or Refused."""
    if option is None or option is False:
        return None
    value = option.get("error_threshold") if isinstance(option, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise binding.Refused(
            INVALID,
            "Invalid circuit breaker configuration, error threshold "
            "percentage must be between 0.0 and 1.0 inclusive, was "
            f"{str(value)[:40]}.",
        )
    return Breaker(float(value))


def record(tunnel: Any, status: int) -> None:
    found = getattr(tunnel, "breaker", None)
    if found is not None:
        found.record(status)


def allows(tunnel: Any) -> bool:
    found = getattr(tunnel, "breaker", None)
    return found is None or found.allow()
