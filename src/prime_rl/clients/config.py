"""Client config shapes: the retry/timeout fields every HTTP client shares, the inference pool, the
admin client.

:class:`RetryPolicy` is the one shape of "how hard to try": a connect timeout, a bound on
retries, and the base and cap of the backoff (:func:`prime_rl.clients.backoff.backoff_delay`).
The admin client's config and the collector's ``--retry`` block subclass it (each with its own
defaults and extra fields); the orchestrator builds one from its top-level
``--max_request_retries`` (``OrchestratorConfig.request_retry``), whose flag name is kept.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import Field, SecretStr

from prime_rl.clients.backoff import backoff_delay
from prime_rl.config import BaseUrl, StrictModel


class RetryPolicy(StrictModel):
    """Timeouts and bounded retries with capped, jittered exponential backoff."""

    connect_timeout_s: float = Field(default=10.0, gt=0)
    """Seconds to establish a connection."""

    max_retries: int = Field(default=3, ge=0)
    """Retries of one request on connection errors, timeouts and 5xx answers (then it fails)."""

    backoff_s: float = Field(default=0.5, ge=0)
    """First retry delay; doubles per retry up to backoff_max_s, with jitter (50-100%)."""

    backoff_max_s: float = Field(default=30.0, ge=0)
    """Largest retry delay."""

    def delay(
        self, attempt: int, rng: random.Random | None = None, retry_after: float | None = None
    ) -> float:
        """Seconds to wait before retry ``attempt`` (1-based) under this policy; see
        :func:`~prime_rl.clients.backoff.backoff_delay`."""
        return backoff_delay(attempt, self.backoff_s, self.backoff_max_s, rng, retry_after)


class AdminClientConfig(RetryPolicy):
    """How weight updates reach the inference servers."""

    mode: Literal["dedicated", "shared"] = "dedicated"
    """dedicated: own connection pool, never queued behind streams. shared: reuse the inference
    pool (the old behaviour, kept for comparison in benchmarks)."""

    token: SecretStr | None = None
    """Admin bearer token of the servers (env PRIME_ADMIN_TOKEN is read when unset)."""

    connect_timeout_s: float = Field(default=5.0, gt=0)
    """Seconds to establish a connection to a server."""

    timeout_s: float = Field(default=600.0, gt=0)
    """Seconds to wait for a server to answer an update (loading a large model takes a while)."""

    max_retries: int = Field(default=3, ge=0)
    """Retries of an update on connection errors, timeouts and 5xx answers (4xx is never retried)."""

    keepalive_s: float = Field(default=2.0, ge=0)
    """Dedicated mode: seconds between the small requests (``GET /health``) that keep one
    connection to every server open from the start, so that an update never waits for the server
    to accept a new connection (a front end busy accepting thousands of streams takes its time).
    Keep it below the server's keep-alive timeout (vLLM: 5 s). 0: connect on the first update."""


class ClientConfig(StrictModel):
    """Inference servers and the connection pools that reach them."""

    base_urls: list[BaseUrl] = Field(default_factory=lambda: ["http://127.0.0.1:8000"], min_length=1)
    """Base URLs of the inference servers (without /v1)."""

    api_key: SecretStr | None = None
    """API key of the OpenAI-compatible servers, if they require one."""

    max_connections: int = Field(default=256, ge=1)
    """Size of the shared inference connection pool (all servers together)."""

    connect_timeout_s: float = Field(default=10.0, gt=0)
    """Seconds to establish an inference connection."""

    timeout_s: float = Field(default=1800.0, gt=0)
    """Seconds an inference request may take (read timeout)."""

    admin: AdminClientConfig = AdminClientConfig()
    """The admin client for /update_weights and /reload_weights."""
