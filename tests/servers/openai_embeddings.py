"""An OpenAI-compatible embeddings server for the tests: `python -m
tests.servers.openai_embeddings [--port N]` prints the port it listens on (127.0.0.1),
then serves `POST /v1/embeddings` with the built-in model's real vectors, as the OpenAI
API does: strings or a list of strings in, `{"object": "list", "data": [{"object":
"embedding", "index", "embedding"}], "model", "usage"}` out, floats or base64 of
little-endian float32 (`encoding_format`), `dimensions` honoured by truncating and
renormalising (as OpenAI's text-embedding-3 models do), errors as `{"error": {...}}`.

A test steers it with `POST /control` `{"script": [...], "key": ..., "retry_after": ...,
"hang": ..., "trickle": ...}`: the next requests take the script's behaviours in turn,
then "ok". Behaviours: ok, 401, 403, 404, 429 (with Retry-After), 500, 503, hang
(answers after `hang` seconds), dims (one dimension short), count (one embedding short),
dup-index, shuffle (the right embeddings in reverse order, each with its index: valid),
malformed (not JSON), huge (a valid answer padded past 4 MiB), close (the connection
closed with no answer), trickle (a valid answer whose body comes one byte every
`trickle` seconds), trickle-head (the status line and headers too), and
`echo:STATUS:FORM`: answered STATUS with the key the request carried echoed in its
message in one FORM of `echoed()` (upper-cased, percent-encoded, base64, ...). With a
`key`, a request without `Authorization: Bearer <key>` is answered 401, its key echoed
in the message as some endpoints do. `GET /log` lists what was asked (never the key).

A model named `anisotropic…` answers on another scale, as many hosted models do: every
vector shares one direction (ANISOTROPY × a fixed unit vector added, then normalised), so
unrelated texts' cosines sit near 0.8 instead of near 0, the order of any one query's
cosines unchanged in kind.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, quote_plus

from memvault.embed import builtin

DIMS = builtin.MODEL.dims
ANISOTROPY = 2.0


class State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.script: list[str] = []
        self.key: str | None = None
        self.retry_after = "0"
        self.hang = 5.0
        self.trickle = 0.1
        self.log: list[dict[str, Any]] = []

    def next(self) -> str:
        with self.lock:
            return self.script.pop(0) if self.script else "ok"


STATE = State()


def echoed(key: str) -> dict[str, str]:
    """The forms in which endpoints (and the proxies before them) echo a key back: in an
    error message, a debug dump of the request, an HTML error page."""
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    return {
        "raw": key, "upper": key.upper(), "lower": key.lower(),
        "percent": quote(key, safe=""), "form": quote_plus(key),
        "base64": b64(key),
        "base64url": base64.urlsafe_b64encode(key.encode()).decode().rstrip("="),
        "bearer-base64": b64(f"Bearer {key}"), "basic": b64(f"user:{key}"),
        "hex": key.encode().hex(), "json": json.dumps(key)[1:-1],
        "json-unicode": "".join(f"\\u{ord(c):04x}" for c in key),
        "html": html.escape(key), "part": key[3:15],
    }


def error(status: int, message: str, kind: str, code: str | None) -> tuple[int, bytes]:
    doc = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return status, json.dumps(doc).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints do

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def body(self) -> Any:
        size = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(size) or b"null")

    def do_GET(self) -> None:
        if self.path == "/log":
            with STATE.lock:
                self.send(200, json.dumps({"requests": STATE.log}).encode())
            return
        self.send(*error(404, f"no route GET {self.path}", "invalid_request_error", None))

    def do_POST(self) -> None:
        try:
            doc = self.body()
        except ValueError:
            self.send(*error(400, "the body is not JSON", "invalid_request_error", None))
            return
        if self.path == "/control":
            with STATE.lock:
                STATE.script = list(doc.get("script") or [])
                STATE.key = doc.get("key")
                STATE.retry_after = str(doc.get("retry_after", "0"))
                STATE.hang = float(doc.get("hang", 5.0))
                STATE.trickle = float(doc.get("trickle", 0.1))
                STATE.log = []
            self.send(200, b"{}")
            return
        if self.path != "/v1/embeddings":
            self.send(*error(404, f"no route POST {self.path}", "invalid_request_error",
                             None))
            return
        self.embeddings(doc)

    def embeddings(self, doc: Any) -> None:
        behaviour = STATE.next()
        auth = self.headers.get("Authorization") or ""
        with STATE.lock:
            key = STATE.key
            STATE.log.append({
                "behaviour": behaviour, "model": doc.get("model"),
                "inputs": len(doc.get("input") or []) if isinstance(doc.get("input"), list)
                else 1,
                "dimensions": doc.get("dimensions"),
                "encoding_format": doc.get("encoding_format"),
                "authorized": key is None or auth == f"Bearer {key}",
                "sent_authorization": bool(auth)})
        if key is not None and auth != f"Bearer {key}":
            given = auth.removeprefix("Bearer ")
            self.send(*error(401, f"Incorrect API key provided: {given}.",
                             "invalid_request_error", "invalid_api_key"))
            return
        if behaviour.startswith("echo:"):
            _, status, form = behaviour.split(":")
            said = echoed(auth.removeprefix("Bearer "))[form]
            self.send(*error(int(status), f"Request {said} was not accepted.",
                             "invalid_request_error", None))
            return
        if behaviour in ("401", "403"):
            self.send(*error(int(behaviour), "You are not allowed to use this model.",
                             "invalid_request_error", "invalid_api_key"))
            return
        if behaviour == "404":
            self.send(*error(404, f"The model `{doc.get('model')}` does not exist.",
                             "invalid_request_error", "model_not_found"))
            return
        if behaviour == "429":
            status, body = error(429, "Rate limit reached.", "requests", "rate_limit_exceeded")
            self.send(status, body, {"Retry-After": STATE.retry_after})
            return
        if behaviour in ("500", "503"):
            self.send(*error(int(behaviour), "The server had an error.", "server_error",
                             None))
            return
        if behaviour == "close":
            self.close_connection = True
            return
        if behaviour == "hang":
            time.sleep(STATE.hang)
        if behaviour == "malformed":
            self.send(200, b'{"object": "list", "data": [{"embedding": [0.1, ')
            return
        self.answer(doc, behaviour)

    def answer(self, doc: Any, behaviour: str) -> None:
        model, texts = doc.get("model"), doc.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(model, str) or not model:
            self.send(*error(400, "you must provide a model parameter",
                             "invalid_request_error", None))
            return
        if not isinstance(texts, list) or not texts or not all(
                isinstance(t, str) and t for t in texts):
            self.send(*error(400, "'input' must be a non-empty string or a list of "
                             "non-empty strings", "invalid_request_error", None))
            return
        dims = doc.get("dimensions") or DIMS
        fmt = doc.get("encoding_format") or "float"
        if not isinstance(dims, int) or not 1 <= dims <= DIMS or fmt not in ("float",
                                                                               "base64"):
            self.send(*error(400, "invalid dimensions or encoding_format",
                             "invalid_request_error", None))
            return
        import numpy as np

        vectors = builtin.load().embed(texts)[:, :dims]
        if model.startswith("anisotropic"):
            shared = np.ones(dims, np.float32) / np.sqrt(dims)
            vectors = vectors + ANISOTROPY * shared * vectors.any(axis=1, keepdims=True)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
        if behaviour == "dims":
            vectors = vectors[:, :-1]
        data = []
        for i, v in enumerate(vectors):
            value: Any = (base64.b64encode(v.astype("<f4").tobytes()).decode()
                          if fmt == "base64" else [float(x) for x in v])
            data.append({"object": "embedding", "index": i, "embedding": value})
        if behaviour == "count":
            data = data[:-1]
        elif behaviour == "dup-index" and len(data) > 1:
            data[1]["index"] = 0
        elif behaviour == "shuffle":
            data.reverse()
        tokens = sum(len(t.split()) for t in texts)
        answer = {"object": "list", "data": data, "model": model,
                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        if behaviour == "huge":
            answer["padding"] = "x" * (4 << 20)
        body = json.dumps(answer).encode()
        if behaviour.startswith("trickle"):
            self.trickle(body, head=behaviour == "trickle-head")
            return
        self.send(200, body)

    def trickle(self, body: bytes, head: bool) -> None:
        """A valid answer, one byte every `trickle` seconds (from its status line with
        `head`, else from its body): never silent for long, never done."""
        top = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode()
        if not head:
            self.wfile.write(top)
        slow = top + body if head else body
        self.close_connection = True
        try:
            for i in range(len(slow)):
                self.wfile.write(slow[i:i + 1])
                time.sleep(STATE.trickle)
        except OSError:  # the client went away: what a client that gives up does
            pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    # A test run that is stopped or crashes takes its server with it (no stray process
    # holding a port, or a suite's end, waiting for it).
    from memvault.process import die_with_parent

    die_with_parent(os.getppid(), None)
    builtin.load()  # ready before the port is announced
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
