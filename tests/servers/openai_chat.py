"""An OpenAI-compatible chat server for the tests that run an agent offline: `python -m
tests.servers.openai_chat` prints the port it listens on (127.0.0.1), then answers every
`POST /v1/chat/completions` with the same reply (REPLY, or --reply), streamed as
server-sent events when the request asks for a stream, whole otherwise, as the OpenAI API
does; `GET /v1/models` lists one model. `GET /log` gives the requests' bodies, in order:
what the agent sent its model (its system prompt included).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = "The staging database listens on port 6543."
MODEL = "test-model"


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, *args: Any) -> None:  # quiet: the test reads /log
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        if self.path.endswith("/log"):
            self._send(200, json.dumps(self.server.requests).encode())
        elif self.path.endswith("/models"):
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "test"}]}).encode())
        else:
            self._send(404, b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, b'{"error": {"message": "not JSON"}}')
            return
        self.server.requests.append(body)
        if not self.path.endswith("/chat/completions"):
            self._send(404, b'{"error": {"message": "not found"}}')
            return
        reply, model = self.server.reply, body.get("model") or MODEL
        usage = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
        base = {"id": "chatcmpl-1", "created": int(time.time()), "model": model}
        if not body.get("stream"):
            self._send(200, json.dumps({**base, "object": "chat.completion", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": reply},
                 "finish_reason": "stop"}], "usage": usage}).encode())
            return
        chunks = [{"role": "assistant", "content": ""}, {"content": reply}]
        events = [{**base, "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": delta, "finish_reason": None}]} for delta in chunks]
        events.append({**base, "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage})
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        self._send(200, data + b"data: [DONE]\n\n", "text/event-stream")


class Server(ThreadingHTTPServer):
    def __init__(self, port: int, reply: str) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.reply = reply
        self.requests: list[Any] = []


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--reply", default=REPLY)
    args = parser.parse_args()
    server = Server(args.port, args.reply)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
