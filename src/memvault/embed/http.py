"""Any OpenAI-compatible embeddings endpoint: OpenAI itself, Ollama, llama.cpp's server,
vLLM, Text Embeddings Inference. One protocol: `POST {url}/embeddings` with
`{"model", "input": [texts], "encoding_format": "float"[, "dimensions"]}`, answered by
`{"data": [{"index", "embedding": [floats]}, ...]}`.

The standard library's http.client is enough for one POST and costs a few milliseconds
to import (an HTTP library costs tens), and only a process that embeds imports it. Every
failure is one error of three kinds: the configuration must change (EmbeddingsUnavailable,
78), the endpoint answered nonsense (EmbeddingsDataError, 65), or try again later
(EmbeddingsError, 75) after retries with back-off within a bounded time.

Each request has a deadline for its whole exchange (name lookup, connection, TLS, the
request, the status line, headers and body), not a time-out per read, which an answer
that trickles in a byte at a time never reaches.

The API key is fetched once per process, from a command or a named environment variable,
kept in this object only, sent only in the Authorization header, and never shown in an
error or passed to any child process. Nothing an endpoint answers reaches an error or a
log: some echo the key back, in forms no scrubbing can list (upper-cased, encoded, in
part), so an error says the status and what it means, never the endpoint's own words.
"""

from __future__ import annotations

import json
import random
import re
import shlex
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from memvault.embed.base import (
    MAX_CHARS,
    EmbeddingsDataError,
    EmbeddingsError,
    EmbeddingsUnavailable,
    ModelId,
)

if TYPE_CHECKING:
    import http.client

    import numpy as np
    import numpy.typing as npt

    from memvault.config import EmbeddingsConfig

KEY_OUTPUT_LIMIT = 64 * 1024  # what a key command may print: a key is far shorter
KEY_RE = re.compile(r"^[\x21-\x7e]{1,8192}$")  # what an HTTP header can carry as a token
RETRY_AFTER_CAP = 60.0  # the longest wait an endpoint's Retry-After is granted, seconds
# An answer's size: a float in JSON takes ~20 bytes; 4,096 dimensions per text at most.
BYTES_PER_TEXT = 4096 * 24
ANSWER_BASE = 1 << 20


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible endpoint. `sleep` waits between retries
    (tests pass one that records instead)."""

    def __init__(self, cfg: EmbeddingsConfig,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not cfg.url or not cfg.model:  # config.resolve refuses this already
            raise EmbeddingsUnavailable("the openai embeddings provider needs a url and a "
                                        "model", hint="embeddings")
        self.cfg = cfg
        self.name = cfg.model
        base = cfg.url.rstrip("/")
        self.where = base
        parts = urlsplit(base if base.endswith("/embeddings") else base + "/embeddings")
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        self._dims = cfg.dimensions
        self._sleep = sleep
        self._key: str | None = None
        self._key_read = False
        self._conn: http.client.HTTPConnection | None = None

    def __repr__(self) -> str:  # never the key
        return f"OpenAIEmbedder({self.where!r}, {self.name!r})"

    @property
    def model(self) -> ModelId:
        if self._dims is None:
            self.embed(["dimensions"])  # the model's length, learned from one answer
        assert self._dims is not None
        return ModelId("openai", self.name, self._dims)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        cut = [t[:MAX_CHARS] for t in texts]
        # An endpoint refuses an empty input: a text with nothing in it is a zero row.
        sent = [i for i, t in enumerate(cut) if t.strip()]
        rows: list[npt.NDArray[np.float64]] = []
        size = self.cfg.batch_size
        try:
            for start in range(0, len(sent), size):
                rows.append(self._batch([cut[i] for i in sent[start:start + size]]))
        finally:
            self.close()
        if self._dims is None:
            return np.zeros((len(texts), self.model.dims), dtype=np.float32)
        out = np.zeros((len(texts), self._dims), dtype=np.float32)
        if sent:
            out[sent] = np.concatenate(rows)
        return out

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- one batch, with retries ------------------------------------------------------

    def _batch(self, batch: list[str]) -> npt.NDArray[np.float64]:
        """The batch's unit vectors, in its order; retried on a passing failure until
        `retries` or `max_wait` runs out."""
        cfg = self.cfg
        doc: dict[str, Any] = {"model": cfg.model, "input": batch, "encoding_format": "float"}
        if cfg.dimensions is not None:
            doc["dimensions"] = cfg.dimensions
        body = json.dumps(doc).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = self._api_key()
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        deadline = time.monotonic() + cfg.max_wait
        limit = ANSWER_BASE + BYTES_PER_TEXT * len(batch)
        tries = 0
        while True:
            tries += 1
            wait: float | None = None
            timeout = max(0.01, min(cfg.timeout, deadline - time.monotonic()))
            try:
                status, retry_after, data = self._post(body, headers,
                                                       time.monotonic() + timeout, limit)
            except TimeoutError:
                failure = f"did not answer within {timeout:g}s"
            except ConnectionRefusedError:
                failure = "refused the connection (is it running?)"
            except OSError as exc:  # no route, reset, a name not found
                if type(exc).__name__ == "SSLCertVerificationError":  # no use retrying
                    raise EmbeddingsUnavailable(
                        f"the embeddings endpoint {self.where} has a certificate that "
                        f"cannot be verified ({getattr(exc, 'verify_message', '') or exc})",
                        hint="embeddings") from None
                failure = f"could not be reached ({exc.strerror or type(exc).__name__})"
            else:
                if status == 200:
                    return self._parse(data, len(batch))
                # The status and a fixed description: never the answer's body.
                if status in (401, 403):
                    raise EmbeddingsUnavailable(
                        f"the embeddings endpoint {self.where} refused the API key "
                        f"(HTTP {status})", hint="embeddings-key")
                if status == 404:
                    raise EmbeddingsUnavailable(
                        f"the embeddings endpoint {self.where} has no model {cfg.model!r} "
                        "or no such path (HTTP 404)", hint="embeddings")
                if status != 429 and status < 500:
                    raise EmbeddingsUnavailable(
                        f"the embeddings endpoint {self.where} refused the request "
                        f"(HTTP {status})", hint="embeddings")
                failure = ("is overloaded (HTTP 429)" if status == 429
                           else f"failed (HTTP {status})")
                wait = retry_after
            if tries > cfg.retries:
                raise EmbeddingsError(f"the embeddings endpoint {self.where} {failure}; "
                                      f"gave up after {tries} tries")
            if wait is None:  # exponential, with jitter so that clients spread out
                wait = cfg.backoff * 2 ** (tries - 1) * (0.5 + random.random())  # noqa: S311
            wait = min(wait, RETRY_AFTER_CAP)
            if time.monotonic() + wait >= deadline:
                raise EmbeddingsError(f"the embeddings endpoint {self.where} {failure}; "
                                      f"gave up after {tries} tries in {cfg.max_wait:g}s")
            self._sleep(wait)

    def _post(self, body: bytes, headers: dict[str, str], deadline: float, limit: int
              ) -> tuple[int, float | None, bytes]:
        """One request by `deadline` (time.monotonic()), else TimeoutError: the status,
        the Retry-After it asked for and the body (at most `limit` bytes: a larger answer
        is not the embeddings asked for).

        A worker thread makes the request and this one waits for it until the deadline:
        a time-out per read bounds no answer that trickles in, and none bounds a name
        lookup. At the deadline the worker's socket is shut down, so it ends too."""
        watch = _Watch()
        conn, self._conn = self._conn, None

        def work() -> None:
            result: tuple[int, float | None, bytes, http.client.HTTPConnection | None] \
                | BaseException
            try:
                result = self._exchange(conn, body, headers, deadline, limit, watch)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                result = exc
            if not watch.give(result) and isinstance(result, tuple) and result[3]:
                result[3].close()  # an answer too late: its connection is not kept

        worker = threading.Thread(target=work, name="mem-embeddings", daemon=True)
        worker.start()
        try:
            worker.join(max(0.0, deadline - time.monotonic()))
        finally:
            came = watch.end()  # Ctrl-C too: the worker stops with it
        if not came:
            raise TimeoutError
        result = watch.result
        if isinstance(result, BaseException):
            raise result
        assert result is not None
        status, after, data, self._conn = result
        return status, after, data

    def _exchange(self, conn: http.client.HTTPConnection | None, body: bytes,
                  headers: dict[str, str], deadline: float, limit: int, watch: _Watch
                  ) -> tuple[int, float | None, bytes, http.client.HTTPConnection | None]:
        """The worker's request, on `conn` (a kept connection) or a new one; with the
        connection to keep, if the endpoint keeps it open. Every step is bounded by what
        is left until `deadline`, and none starts once the caller stopped waiting."""
        import http.client

        reused = conn is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            conn = conn or self._connect(left)
            try:
                if conn.sock is None:
                    conn.connect()
                watch.using(conn.sock)
                conn.sock.settimeout(max(0.01, deadline - time.monotonic()))
                conn.request("POST", self._path, body, headers)
                response = conn.getresponse()
                data = response.read(limit + 1)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                if reused:  # a kept connection the server had closed: once more, afresh
                    reused, conn = False, None
                    continue
                raise
            except http.client.HTTPException as exc:  # a status line that is not HTTP
                conn.close()
                raise OSError(f"not an HTTP answer: {type(exc).__name__}") from None
            except BaseException:
                conn.close()
                raise
            break
        if len(data) > limit:
            conn.close()
            raise EmbeddingsDataError(f"the embeddings endpoint {self.where} answered more "
                                      f"than {limit >> 20} MiB for one batch",
                                      hint="embeddings")
        kept: http.client.HTTPConnection | None = conn
        if response.will_close:
            conn.close()
            kept = None
        return response.status, retry_after(response.getheader("Retry-After")), data, kept

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        import http.client

        if self._https:
            import ssl

            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _parse(self, data: bytes, count: int) -> npt.NDArray[np.float64]:
        """The answer's vectors in input order, of unit length (EmbeddingsDataError for
        anything else)."""
        import numpy as np

        def bad(what: str) -> EmbeddingsDataError:
            return EmbeddingsDataError(f"the embeddings endpoint {self.where} answered "
                                       f"{what}", hint="embeddings")

        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise bad("something that is not JSON") from None
        items = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise bad("JSON without a list of embeddings (\"data\")")
        if len(items) != count:
            raise bad(f"{len(items)} embeddings for {count} texts")
        indexes = [i.get("index") for i in items]
        given = [n for n in indexes if isinstance(n, int) and not isinstance(n, bool)]
        if len(given) == count:  # put back in input order
            if sorted(given) != list(range(count)):
                raise bad("indexes that do not match the texts sent")
            items = [items[j] for j in sorted(range(count), key=given.__getitem__)]
        elif any(n is not None for n in indexes):
            raise bad("indexes that do not match the texts sent")
        vectors: list[Any] = [i.get("embedding") for i in items]
        if not all(isinstance(v, list) and v and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
                for v in vectors):
            raise bad("an embedding that is not a list of numbers")
        lengths = {len(v) for v in vectors}
        expected = self._dims
        if len(lengths) != 1 or (expected is not None and lengths != {expected}):
            shown = ", ".join(str(n) for n in sorted(lengths))
            raise bad(f"vectors of {shown} dimensions, not {expected or 'one length'}")
        array = np.asarray(vectors, dtype=np.float64)
        if not np.isfinite(array).all():
            raise bad("an embedding with values that are not finite numbers")
        norms = np.linalg.norm(array, axis=1, keepdims=True)
        np.divide(array, norms, out=array, where=norms > 0)
        self._dims = array.shape[1]
        return array

    # -- the key ----------------------------------------------------------------------

    def _api_key(self) -> str | None:
        if not self._key_read:
            self._key = self._read_key()
            self._key_read = True
        return self._key

    def _read_key(self) -> str | None:
        import os

        cfg = self.cfg
        if cfg.key_env:
            key = os.environ.get(cfg.key_env, "").strip()
            if not key:
                raise EmbeddingsUnavailable(f"the environment variable {cfg.key_env} "
                                            "(embeddings.key_env) is not set",
                                            hint="embeddings-key")
            return check_key(key, f"the environment variable {cfg.key_env}")
        if cfg.key_command:
            return check_key(run_key_command(cfg.key_command, cfg.timeout),
                             "embeddings.key_command's output")
        return None


class _Watch:
    """Between a request's worker and the thread waiting for it: the socket the worker
    uses, shut down when the waiting ends, and the result, taken only if it came in
    time (one that comes later is the worker's to drop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._over = False
        self.came = False
        self.result: tuple[int, float | None, bytes, http.client.HTTPConnection | None] \
            | BaseException | None = None

    def using(self, sock: socket.socket | None) -> None:
        """The worker's socket from now on; TimeoutError when nobody waits any more."""
        with self._lock:
            if self._over:
                raise TimeoutError
            self._sock = sock

    def give(self, result: tuple[int, float | None, bytes, http.client.HTTPConnection | None]
             | BaseException) -> bool:
        """Hand the result over; False when it came too late."""
        with self._lock:
            if self._over:
                return False
            self.result, self.came = result, True
            return True

    def end(self) -> bool:
        """Stop waiting: whether the result came. A worker still at work has its socket
        shut down (a read it is blocked in returns at once) and starts no other step."""
        with self._lock:
            self._over = True
            if not self.came and self._sock is not None:
                try:  # the plain socket's own: a TLS socket's would unset its state
                    socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
                except OSError:
                    pass
            return self.came


def run_key_command(command: str, timeout: float) -> str:
    """What the key command prints: run without a shell, with the minimal environment
    (no MEM_* variable, no other key), for at most `timeout` seconds and a bounded
    output; nothing it starts outlives it. Errors never carry its output."""
    from memvault.process import minimal_env, run_bounded

    def fail(why: str) -> EmbeddingsUnavailable:
        return EmbeddingsUnavailable(f"embeddings.key_command {why}", hint="embeddings-key")

    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise fail(f"cannot be parsed: {exc}") from None
    if not argv:
        raise fail("is empty")
    try:
        done = run_bounded(argv, None, timeout, KEY_OUTPUT_LIMIT, minimal_env())
    except (OSError, ValueError) as exc:
        raise fail(f"cannot be started: {getattr(exc, 'strerror', None) or exc}") from None
    if done.problem == "timeout":
        raise fail(f"did not answer within {timeout:g}s; it was stopped")
    if done.problem is not None:
        raise fail(f"printed more than {KEY_OUTPUT_LIMIT} bytes; that is not a key")
    if done.returncode != 0:
        raise fail(f"exited with status {done.returncode}")
    return done.output.decode(errors="replace").strip()


def check_key(key: str, where: str) -> str:
    """A key that an Authorization header can carry (never shown when it cannot)."""
    if not KEY_RE.fullmatch(key):
        raise EmbeddingsUnavailable(f"{where} is not an API key (one word of printable "
                                    "characters)", hint="embeddings-key")
    return key


def retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: a number of seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - time.time()
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)
