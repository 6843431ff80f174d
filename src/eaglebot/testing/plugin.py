"""The pytest plugin of eaglebot.testing, registered by eaglebot's `pytest11` entry point: a
team that installs eaglebot has the `chatbot` fixture in its own tests (docs/testing.md).

Nothing heavy is imported until a test asks for the fixture: the plugin loads in every
pytest run of an environment where eaglebot is installed.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, AsyncIterator

import pytest

if TYPE_CHECKING:
    from eaglebot.testing.chat import ChatBot

# Without pytest-asyncio the fixture says what to install, instead of failing every pytest run.
if importlib.util.find_spec("pytest_asyncio") is not None:
    import pytest_asyncio

    @pytest_asyncio.fixture
    async def chatbot(tmp_path: Path) -> AsyncIterator[ChatBot]:
        """The product's Slack app in process over one scripted host, `gpu-01` (ChatBot.open
        in tmp_path); closed after the test. A test that needs other hosts, playbooks or access
        opens its own with `ChatBot.open`."""
        from eaglebot.testing.chat import ChatBot

        bot = await ChatBot.open(tmp_path / "chatbot")
        try:
            yield bot
        finally:
            await bot.close()
else:
    @pytest.fixture
    def chatbot() -> None:
        pytest.fail("the chatbot fixture needs pytest-asyncio: pip install 'eaglebot[testing]'")
