"""A chat model behind any OpenAI-compatible chat-completions endpoint.

`POST {url}/chat/completions` with the model, temperature 0, a system and a user message; the
reply is `choices[0].message.content`. The key, when given, goes in a bearer header and never in
the identity. Any failure (a refused connection, a timeout, an HTTP error, a reply of another
shape) raises: callers decide what a failure means, and none of them reads it as an answer.
Endpoint, model and key come from arguments or from `$<PREFIX>_URL`, `$<PREFIX>_MODEL` and
`$<PREFIX>_API_KEY`, read when the model is built; the environment is never changed.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Mapping

from rms_retrieval.stores.protocols import ChatModel


class ChatCompletionsModel(ChatModel):
    """One endpoint and model; `reply()` is one request."""

    def __init__(self, url: str, model: str, *, api_key: str | None = None, timeout_seconds: float = 10.0) -> None:
        if not url or not model:
            raise ValueError("a chat-completions model needs an endpoint URL and a model name")
        if not timeout_seconds > 0:
            raise ValueError(f"the chat-completions timeout must be positive seconds, got {timeout_seconds}")
        self._url = url.rstrip("/") + "/chat/completions"
        self._model = model
        self._api_key = api_key
        self._timeout = timeout_seconds

    @classmethod
    def from_environment(cls, prefix: str, *, url: str | None = None, model: str | None = None,
                         api_key: str | None = None, timeout_seconds: float = 60.0,
                         environ: Mapping[str, str] | None = None) -> ChatCompletionsModel:
        """The model the arguments name, else `$<prefix>_URL` / `_MODEL` / `_API_KEY`; a missing URL
        or model is one clear error."""
        env = os.environ if environ is None else environ
        url = url or env.get(f"{prefix}_URL")
        model = model or env.get(f"{prefix}_MODEL")
        if not url or not model:
            raise ValueError(f"this needs a chat-completions endpoint: pass --url and --model, or set "
                             f"${prefix}_URL and ${prefix}_MODEL")
        return cls(url, model, api_key=api_key or env.get(f"{prefix}_API_KEY"), timeout_seconds=timeout_seconds)

    @property
    def identity(self) -> str:
        return f"openai_chat:{self._model}@{self._url}"

    def reply(self, system: str, user: str) -> str:
        body = {"model": self._model, "temperature": 0, "n": 1,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self._url, data=json.dumps(body).encode(), headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self._timeout) as response:
            reply = json.loads(response.read().decode("utf-8"))
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ValueError(f"the chat-completions reply has no choices[0].message.content: {str(reply)[:200]}") from None
        if not isinstance(content, str):
            raise ValueError("the chat-completions reply's content is not text")
        return content
