"""A query reformulation provider over any OpenAI-compatible chat-completions endpoint
(`chat_completions.ChatCompletionsModel`): a fixed instruction and the question; the reply's
lines are the alternative questions (list markers and quotes stripped). The URL and model come
from the settings or `$RMS_REFORMULATION_URL` / `$RMS_REFORMULATION_MODEL`, the key from the
settings or the environment variable the settings name (default `$RMS_REFORMULATION_API_KEY`),
read when the provider is built; the environment is never changed. Any failure (a refused
connection, a timeout, an HTTP error, a reply of another shape) raises, and the reformulation node
turns it into "no alternatives" with the failure recorded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from rms_retrieval.stores.protocols import QueryReformulator
from rms_retrieval.stores.providers.chat_completions import ChatCompletionsModel

INSTRUCTION = (
    "You rewrite a question about a user's past conversations into other questions that would find the same "
    "memories: different words for the same things, the statement that would answer it, the names and dates "
    "it implies. Reply with one question per line and nothing else."
)
_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s*")


class ChatCompletionsReformulator(QueryReformulator):
    """Alternative questions from an OpenAI-compatible `/chat/completions` endpoint."""

    def __init__(self, url: str, model: str, *, api_key: str | None = None, timeout_seconds: float = 10.0) -> None:
        self._chat = ChatCompletionsModel(url, model, api_key=api_key, timeout_seconds=timeout_seconds)

    @classmethod
    def from_settings(cls, settings, environ: Mapping[str, str] | None = None) -> ChatCompletionsReformulator:
        """The provider `reformulation` settings describe; a missing URL or model is one clear error."""
        env = os.environ if environ is None else environ
        url = settings.url or env.get("RMS_REFORMULATION_URL")
        model = settings.model or env.get("RMS_REFORMULATION_MODEL")
        if not url or not model:
            raise ValueError("query reformulation needs a chat-completions endpoint: set reformulation.url and "
                             "reformulation.model, or $RMS_REFORMULATION_URL and $RMS_REFORMULATION_MODEL")
        key = settings.api_key.get_secret_value() if settings.api_key is not None else env.get(settings.api_key_env)
        return cls(url, model, api_key=key, timeout_seconds=settings.timeout_seconds)

    @property
    def identity(self) -> str:
        return self._chat.identity

    def alternatives(self, question: str, limit: int) -> tuple[str, ...]:
        content = self._chat.reply(INSTRUCTION, question)
        lines = (_MARKER.sub("", line).strip().strip('"').strip() for line in content.splitlines())
        return tuple(line for line in lines if line)[:limit]
