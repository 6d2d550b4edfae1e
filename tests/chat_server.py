"""An OpenAI-compatible /v1/chat/completions server on the loopback address, for the tests of
the chat providers (the reformulator, the answerability evaluator, the answer benchmark).

`reply` says what it answers: text, None (a reply of another shape), or a function of the
request body. `status` and `delay` break it; `requests` holds what it was sent.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ChatServer(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, dict, dict]] = []
        self.reply: str | None | Callable[[dict], str | None] = "ok"
        self.status = 200
        self.delay = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def answer(self, body: dict) -> str | None:
        return self.reply(body) if callable(self.reply) else self.reply


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        server: ChatServer = self.server  # type: ignore[assignment]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.requests.append((self.path, dict(self.headers), body))
        time.sleep(server.delay)
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": server.answer(body)}}]}).encode()
        self.send_response(server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


FAILURES = ("timeout", "http_error", "refused", "shape")


def broken(server: ChatServer, failure: str) -> str:
    """Break `server` the way `failure` (one of FAILURES) names; the URL to call: the server's,
    or one where nothing listens ("refused")."""
    if failure == "timeout":
        server.delay = 1.0
    elif failure == "http_error":
        server.status = 500
    elif failure == "shape":
        server.reply = None
    elif failure == "refused":
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            return f"http://127.0.0.1:{free.getsockname()[1]}/v1"
    else:
        raise ValueError(f"unknown failure {failure!r}; choose from {', '.join(FAILURES)}")
    return server.url


@contextmanager
def running_chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
