"""The bot's Slack Web API client, and the one line that names a Slack failure in the log."""
from __future__ import annotations

from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.web.async_client import AsyncWebClient

from eaglebot.config import Settings

# chat.postMessage's errors that mean "invite the bot", not "Slack is down"
NOT_IN_CHANNEL = {"not_in_channel", "channel_not_found", "is_archived"}


def make_client(settings: Settings, token: str | None, *, backoff_s: float = 0.5,
                timeout_s: int = 30) -> AsyncWebClient:
    """The bot's Web API client: SLACK_API_URL honoured, 429s and 5xx retried."""
    kw: dict[str, Any] = {}
    if url := settings.slack_api_url():
        kw["base_url"] = url
    calc = BackoffRetryIntervalCalculator(backoff_factor=backoff_s)
    return AsyncWebClient(token=token, timeout=timeout_s, retry_handlers=[
        AsyncConnectionErrorRetryHandler(max_retry_count=2, interval_calculator=calc),
        AsyncRateLimitErrorRetryHandler(max_retry_count=3),
        AsyncServerErrorRetryHandler(max_retry_count=2, interval_calculator=calc),
    ], **kw)


def slack_error(e: Exception) -> str:
    if isinstance(e, SlackApiError):
        try:
            return str(e.response.get("error") or e.response.status_code)
        except Exception:
            return "slack_api_error"
    return type(e).__name__
