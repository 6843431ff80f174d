"""The bot's Slack Web API client, and the one line that names a Slack failure in the log."""
from __future__ import annotations

from typing import Any, Protocol

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient

from eaglebot.config import Settings

# chat.postMessage's errors that mean "invite the bot", not "Slack is down"
NOT_IN_CHANNEL = {"not_in_channel", "channel_not_found", "is_archived"}


class SlackCounters(Protocol):
    """Where the client reports its retries and failures (`eagle serve`'s /metrics)."""

    def slack_retry(self, reason: str) -> None: ...

    def slack_error(self, error: str) -> None: ...


def make_client(settings: Settings, token: str | None, *, backoff_s: float = 0.5,
                timeout_s: int = 30, counters: SlackCounters | None = None) -> AsyncWebClient:
    """The bot's Web API client: SLACK_API_URL honoured, 429s and 5xx retried."""
    kw: dict[str, Any] = {}
    if url := settings.slack_api_url():
        kw["base_url"] = url
    calc = BackoffRetryIntervalCalculator(backoff_factor=backoff_s)
    handlers: list[AsyncRetryHandler] = [
        AsyncConnectionErrorRetryHandler(max_retry_count=2, interval_calculator=calc),
        AsyncRateLimitErrorRetryHandler(max_retry_count=3),
        AsyncServerErrorRetryHandler(max_retry_count=2, interval_calculator=calc),
    ]
    if counters is not None:
        handlers = [*(_CountedRetry(h, counters) for h in handlers), _ErrorCount(counters)]
    return AsyncWebClient(token=token, timeout=timeout_s, retry_handlers=handlers, **kw)


class _CountedRetry(AsyncRetryHandler):
    """One of slack_sdk's retry handlers, its retries counted (by the handler's kind)."""

    def __init__(self, inner: AsyncRetryHandler, counters: SlackCounters):
        super().__init__(inner.max_retry_count, inner.interval_calculator)
        self.inner, self.counters = inner, counters
        self.reason = {AsyncConnectionErrorRetryHandler: "connection", AsyncRateLimitErrorRetryHandler: "ratelimited",
                       AsyncServerErrorRetryHandler: "server_error"}.get(type(inner), type(inner).__name__)

    async def can_retry_async(self, *, state: RetryState, request: HttpRequest, response: HttpResponse | None = None,
                              error: Exception | None = None) -> bool:
        return await self.inner.can_retry_async(state=state, request=request, response=response, error=error)

    async def prepare_for_next_attempt_async(self, *, state: RetryState, request: HttpRequest,
                                             response: HttpResponse | None = None,
                                             error: Exception | None = None) -> None:
        self.counters.slack_retry(self.reason)
        await self.inner.prepare_for_next_attempt_async(state=state, request=request, response=response, error=error)


class _ErrorCount(AsyncRetryHandler):
    """Last in the list, it sees each attempt no handler retries: it retries nothing and
    counts the failed ones (HTTP >= 400, `ok: false`, no answer)."""

    async def _can_retry_async(self, *, state: RetryState, request: HttpRequest,
                               response: HttpResponse | None = None, error: Exception | None = None) -> bool:
        if error is not None:
            self.counters.slack_error(type(error).__name__)
        elif response is not None:
            body = response.body if isinstance(response.body, dict) else {}
            if response.status_code >= 400:
                self.counters.slack_error(str(body.get("error") or f"http_{response.status_code}"))
            elif body.get("ok") is False:
                self.counters.slack_error(str(body.get("error") or "not_ok"))
        return False

    def __init__(self, counters: SlackCounters):
        super().__init__(max_retry_count=1_000_000)   # so that can_retry_async always asks _can_retry_async
        self.counters = counters


def slack_error(e: Exception) -> str:
    if isinstance(e, SlackApiError):
        try:
            return str(e.response.get("error") or e.response.status_code)
        except Exception:
            return "slack_api_error"
    return type(e).__name__
