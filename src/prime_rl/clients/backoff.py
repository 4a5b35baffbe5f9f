"""The one retry delay of every client: capped exponential backoff with jitter, or Retry-After.

Shape (the collector's, kept because it is bounded on both sides): before retry ``attempt``
(1-based) the ceiling is ``min(cap_s, base_s * 2 ** (attempt - 1))`` and the delay is drawn
uniformly from ``[ceiling / 2, ceiling]``. So the delay never exceeds ``cap_s``, never falls
below half the ceiling (retries of many clients spread out without any of them retrying at
once), and with base 0.5 s it runs 0.25-0.5, 0.5-1, 1-2, 2-4 s, ... When the server named a
wait (HTTP ``Retry-After``) that wait is used as given.

:func:`quota_reset_after` reads the rate-limit headers that say a whole quota is used up (OpenAI's
``x-ratelimit-remaining-requests``/``-tokens`` with ``x-ratelimit-reset-*``, and the IETF draft's
``RateLimit-Remaining``/``RateLimit-Reset``): the server asks every request to wait, not only one.

Callers and their base/cap: the orchestrator's rollout requests (0.5 s, 10 s), the admin client
(``client.admin.backoff_s`` 0.5 s, ``backoff_max_s`` 30 s), the collector (``retry.backoff_s``
0.5 s, ``retry.backoff_max_s`` 30 s).
"""

from __future__ import annotations

import email.utils
import math
import random
import re
import time
from collections.abc import Mapping

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


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(value: str | None) -> float | None:
    """Seconds from a rate-limit reset value: plain seconds (``"12"``, ``"0.5"``) or a Go-style
    duration as OpenAI sends it (``"1s"``, ``"6m0s"``, ``"20ms"``, ``"1h2m"``); None when unreadable."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    if not text or _DURATION_PART.sub("", text):
        return None  # empty, or something besides number-unit parts
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[unit] for n, unit in _DURATION_PART.findall(text))


_QUOTA_HEADERS = (
    ("x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"),
    ("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"),
    ("ratelimit-remaining", "ratelimit-reset"),
)


def quota_reset_after(headers: Mapping[str, str]) -> float | None:
    """Seconds until a used-up quota resets, when the answer's rate-limit headers say one is used
    up (a remaining count of 0); None otherwise. A used-up quota without a readable reset gives 0
    (the caller then uses ``Retry-After`` or its own backoff). ``headers`` must look names up
    case-insensitively (aiohttp's do)."""
    waits = []
    for remaining, reset in _QUOTA_HEADERS:
        left = headers.get(remaining)
        if left is None or left.strip() not in ("0", "0.0"):
            continue
        waits.append(parse_duration(headers.get(reset)) or 0.0)
    return max(waits) if waits else None
