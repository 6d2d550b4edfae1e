"""The chat-completions model against a real HTTP server on 127.0.0.1: what it sends, where the
key goes, what it reads, and that every failure raises."""

from __future__ import annotations

import urllib.error

import pytest

from rms_retrieval.stores.providers.chat_completions import ChatCompletionsModel
from tests.chat_server import broken, running_chat_server


@pytest.fixture
def chat():
    with running_chat_server() as server:
        yield server


def test_one_request_with_the_system_and_user_messages_at_temperature_zero(chat):
    chat.reply = "Paris"
    model = ChatCompletionsModel(chat.url + "/", "reader", api_key="sk-secret", timeout_seconds=5)
    assert model.reply("Answer briefly.", "Capital of France?") == "Paris"
    path, headers, body = chat.requests[0]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer sk-secret"
    assert body == {"model": "reader", "temperature": 0, "n": 1,
                    "messages": [{"role": "system", "content": "Answer briefly."},
                                 {"role": "user", "content": "Capital of France?"}]}
    assert model.identity == f"openai_chat:reader@{chat.url}/chat/completions" and "sk-secret" not in model.identity


def test_without_a_key_no_authorization_header_is_sent(chat):
    ChatCompletionsModel(chat.url, "reader").reply("s", "u")
    assert "Authorization" not in chat.requests[0][1]


def test_the_environment_names_endpoint_model_and_key_and_arguments_win(chat):
    env = {"RMS_X_URL": chat.url, "RMS_X_MODEL": "env-model", "RMS_X_API_KEY": "sk-env"}
    model = ChatCompletionsModel.from_environment("RMS_X", environ=env)
    model.reply("s", "u")
    assert chat.requests[-1][2]["model"] == "env-model" and chat.requests[-1][1]["Authorization"] == "Bearer sk-env"
    assert "arg-model" in ChatCompletionsModel.from_environment("RMS_X", model="arg-model", environ=env).identity
    with pytest.raises(ValueError, match=r"pass --url and --model, or set \$RMS_X_URL and \$RMS_X_MODEL"):
        ChatCompletionsModel.from_environment("RMS_X", environ={})


@pytest.mark.parametrize(("url", "model", "timeout", "message"), [
    ("", "m", 5, "needs an endpoint URL and a model"), ("http://127.0.0.1:1/v1", "", 5, "needs an endpoint URL"),
    ("http://127.0.0.1:1/v1", "m", 0, "timeout must be positive")])
def test_bad_arguments_are_one_clear_error(url, model, timeout, message):
    with pytest.raises(ValueError, match=message):
        ChatCompletionsModel(url, model, timeout_seconds=timeout)


@pytest.mark.parametrize(("break_it", "error"), [("http_error", urllib.error.HTTPError), ("timeout", TimeoutError),
                                                 ("refused", urllib.error.URLError), ("shape", ValueError)])
def test_every_failure_raises(chat, break_it, error):
    url = broken(chat, break_it)
    with pytest.raises(error):
        ChatCompletionsModel(url, "m", timeout_seconds=0.3).reply("s", "u")
