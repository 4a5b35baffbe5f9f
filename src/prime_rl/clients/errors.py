"""One classification of failed HTTP requests, shared by every client.

A request that does not produce a usable answer raises a :class:`RequestError` subclass, so each
caller decides what to do by type alone:

- HTTP 429 -> :class:`RateLimited` (retryable; carries the server's ``Retry-After``),
- HTTP 5xx -> :class:`ServerError` (retryable; a 503 may carry ``Retry-After``),
- connection refused/reset, timeouts, a malformed answer -> :class:`TransportError` (retryable;
  ``connect_failed`` when no connection could be made at all, i.e. the server is down),
- any other 4xx -> :class:`Rejected`: the request itself is wrong; never retried.

The orchestrator and the collector retry the retryable ones; the admin client retries only
:class:`ServerError` and :class:`TransportError` (a weight update answered 4xx is refused).
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from prime_rl.clients.backoff import parse_retry_after, quota_reset_after

BODY_KEEP = 4096
"""Characters of an error answer kept on the exception (messages quote the first 500)."""


class RequestError(Exception):
    """A request did not produce a usable answer. ``status`` is the HTTP status (None when there
    was no answer), ``url`` the server's base URL, ``body`` the start of the answer's text."""

    retryable = True

    def __init__(
        self,
        message: str,
        status: int | None = None,
        url: str | None = None,
        body: str = "",
        *,
        retry_after: float | None = None,
        server_wide: bool = False,
    ):
        super().__init__(message)
        self.status, self.url, self.body = status, url, body
        self.retry_after = retry_after
        """Seconds the server asked before a retry (its ``Retry-After``); None when it named none."""
        self.server_wide = server_wide
        """The server asked every request to wait, not only this one: a 503 with ``Retry-After``, or
        a 429 whose rate-limit headers say the quota is used up (remaining 0)."""


class RateLimited(RequestError):
    """HTTP 429; ``retry_after`` is the server's Retry-After in seconds (None when absent)."""

    def __init__(
        self, message: str, retry_after: float | None, url: str, body: str = "", *, server_wide: bool = False
    ):
        super().__init__(message, 429, url, body, retry_after=retry_after, server_wide=server_wide)


class ServerError(RequestError):
    """HTTP 5xx."""


class TransportError(RequestError):
    """Connection refused/reset, timeouts, a malformed answer. ``detail`` names the failure
    without the URL (e.g. ``ConnectError: ...``); ``connect_failed``: no connection was made."""

    def __init__(
        self,
        message: str,
        status: int | None = None,
        url: str | None = None,
        *,
        detail: str = "",
        connect_failed: bool = False,
    ):
        super().__init__(message, status, url)
        self.detail = detail or message
        self.connect_failed = connect_failed


class Rejected(RequestError):
    """A 4xx other than 429: the request itself is wrong; never retried."""

    retryable = False


def describe(exc: BaseException) -> str:
    """A short name and reason for a failed request, the same whatever HTTP library raised it:
    ``ConnectError: ...`` when no connection could be made, else ``<ExceptionType>: <message>``."""
    kind = "ConnectError" if is_connect_failure(exc) else type(exc).__name__
    text = str(exc)
    if not text and isinstance(exc, TimeoutError):
        text = "no answer in time"
    return f"{kind}: {text}" if text else kind


def is_connect_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says no connection could be made (refused, unreachable, unresolvable)."""
    return isinstance(exc, (aiohttp.ClientConnectorError, ConnectionRefusedError))


def transport_error(exc: BaseException, base: str) -> TransportError:
    """The :class:`TransportError` for an exception raised while talking to server ``base``."""
    detail = describe(exc)
    return TransportError(
        f"{base}: {detail}", None, base, detail=detail, connect_failed=is_connect_failure(exc)
    )


def status_error(
    status: int, raw: bytes, base: str, headers: Mapping[str, str] | None = None
) -> RequestError:
    """The :class:`RequestError` for a non-200 answer ``status`` with body ``raw`` and ``headers``
    (case-insensitive, as aiohttp gives them) from ``base``."""
    body = raw[:BODY_KEEP].decode("utf-8", "replace")
    message = f"{base}: HTTP {status} {body[:500]}"
    headers = headers or {}
    retry_after = parse_retry_after(headers.get("Retry-After"))
    if status == 429:
        quota_wait = quota_reset_after(headers)
        if retry_after is None:
            retry_after = quota_wait
        return RateLimited(message, retry_after, base, body, server_wide=quota_wait is not None)
    if status >= 500:
        server_wide = status == 503 and retry_after is not None
        return ServerError(message, status, base, body, retry_after=retry_after, server_wide=server_wide)
    return Rejected(message, status, base, body)


TRANSPORT_EXCEPTIONS = (aiohttp.ClientError, OSError, TimeoutError)
"""What a request raises when it fails below HTTP: refused or dropped connections, timeouts, a
truncated or unparsable answer (each becomes a :class:`TransportError`)."""
