"""Per-account API rate limit, for self-hosted operators (off unless configured).

``RATE_LIMIT_PER_MINUTE=N`` (chalicelib.core.config; 0, the default, turns it off) lets each
account make at most N authenticated API requests per calendar minute (UTC); the next one is
a 429 ``ERR_NGROK_226`` (the hosted service's code for "Your account is rate limited to MAX
API requests per INTERVAL") with ``Retry-After``: the whole seconds until the minute ends.
Every authenticated request counts, refused ones too; unauthenticated ones (401, the
OpenAPI document) do not.

The count is one item per account and minute (``RL#<account>`` / ``<minute number>``),
raised by one atomic UpdateItem per request (so concurrent Lambdas share it exactly) and
removed by DynamoDB's TTL a minute after its window. Cost when on: one write per request.
A fixed window admits up to 2N requests across a minute boundary; that is the usual trade
for one write per request. In the deployed stack API Gateway's stage throttling
(scripts/deploy_stack.py) is a second, service-wide limit in front of this one; it answers
429 with the same code.
"""

import math
import time
from typing import Callable, Optional

from chalicelib.core import errors, store
from chalicelib.core.config import get_settings

WINDOW_SECONDS = 60


def check(account_id: Optional[str], clock: Callable[[], float] = time.time) -> None:
    """Count this request against the account's window; RateLimited when over the limit."""
    limit = get_settings().rate_limit_per_minute
    if not limit or not account_id:
        return
    now = clock()
    window = int(now // WINDOW_SECONDS)
    count = store.increment(
        store.rate_limit_pk(account_id), str(window), expires_at=(window + 2) * WINDOW_SECONDS
    )
    if count > limit:
        retry_after = max(1, math.ceil((window + 1) * WINDOW_SECONDS - now))
        raise errors.RateLimited(
            f"Your account is rate limited to {limit} API requests per minute; retry in "
            f"{retry_after} seconds",
            retry_after=retry_after,
        )
