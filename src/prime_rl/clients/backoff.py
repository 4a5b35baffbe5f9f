"""The one retry delay of every client: capped exponential backoff with jitter, or Retry-After.

Shape (the collector's, kept because it is bounded on both sides): before retry ``attempt``
(1-based) the ceiling is ``min(cap_s, base_s * 2 ** (attempt - 1))`` and the delay is drawn
uniformly from ``[ceiling / 2, ceiling]``. So the delay never exceeds ``cap_s``, never falls
below half the ceiling (retries of many clients spread out without any of them retrying at
once), and with base 0.5 s it runs 0.25-0.5, 0.5-1, 1-2, 2-4 s, ... When the server named a
wait (HTTP ``Retry-After``) that wait is used as given.

Callers and their base/cap: the orchestrator's rollout requests (0.5 s, 10 s), the admin client
(``client.admin.backoff_s`` 0.5 s, ``backoff_max_s`` 30 s), the collector (``retry.backoff_s``
0.5 s, ``retry.backoff_max_s`` 30 s).
"""

from __future__ import annotations

import email.utils
import math
import random
import time

_MAX_DOUBLINGS = 62  # 2**62 * any sane base is far past any cap; keeps the float finite


def backoff_delay(
    attempt: int,
    base_s: float,
    cap_s: float,
    rng: random.Random | None = None,
    retry_after: float | None = None,
) -> float:
    """Seconds to wait before retry ``attempt`` (1-based).

    ``retry_after`` (seconds, e.g. from :func:`parse_retry_after`) wins when given: the server
    said how long to wait. Otherwise a value in ``[c / 2, c]`` with
    ``c = min(cap_s, base_s * 2 ** (attempt - 1))``, drawn from ``rng`` (default: the ``random``
    module).
    """
    if retry_after is not None:
        return max(0.0, retry_after)
    ceiling = min(cap_s, base_s * 2.0 ** min(max(attempt - 1, 0), _MAX_DOUBLINGS))
    return (rng or random).uniform(ceiling / 2, ceiling)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or
    unreadable. A date in the past gives 0."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
