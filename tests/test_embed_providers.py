"""The embeddings providers: one contract run against the built-in model and against a
real OpenAI-compatible server process (tests/servers/openai_embeddings.py, serving the
built-in model's vectors); every failure of an endpoint as its one documented error and
exit code; the API key kept out of errors, logs and children; the built-in model's own
loading code on damaged files; the `embeddings:` configuration."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from email.utils import formatdate
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pytest_console_scripts import ScriptRunner

from memvault.config import EmbeddingsConfig, resolve
from memvault.embed import builtin, open_embedder
from memvault.embed.base import (
    EmbeddingsDataError,
    EmbeddingsError,
    EmbeddingsUnavailable,
    ModelId,
)
from memvault.embed.http import RETRY_AFTER_CAP, OpenAIEmbedder
from memvault.errors import ConfigError, DataError
from memvault.ops import remember
from memvault.vault.vault import Vault
from tests.conftest import home_environment, mem, one_error_line
from tests.servers.openai_embeddings import echoed

ROOT = Path(__file__).resolve().parent.parent
MEM = Path(sys.executable).parent / "mem"
HERBS = "I grow basil and mint on the balcony, and cherry tomatoes in the garden"
KEY = "sk-test-Zq8vN3pL0wXr5T"  # what the key command prints: found nowhere but the header

SIMILAR = ("my cat sleeps on the sofa all afternoon", "the kitten naps on the couch")
UNRELATED = "quarterly corporate tax filing deadline for the accounting department"
TEXTS = ["the deploy script needs the staging credentials first", "", SIMILAR[0],
         "prefer tabs over spaces in the Makefile", UNRELATED, SIMILAR[1]]


class Server:
    """The test server process: its URL, and what to do with the next requests."""

    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc, self.port = proc, port
        self.base = f"http://127.0.0.1:{port}"
        self.url = self.base + "/v1"

    def call(self, method: str, path: str, doc: Any = None) -> Any:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, json.dumps(doc) if doc is not None else None)
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def control(self, *script: str, key: str | None = None, retry_after: str = "0",
                hang: float = 3.0, trickle: float = 0.1) -> None:
        self.call("POST", "/control", {"script": list(script), "key": key,
                                       "retry_after": retry_after, "hang": hang,
                                       "trickle": trickle})

    def log(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/log")["requests"])


@pytest.fixture(scope="session")
def server_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # A home of its own: started before any test's, it caches the model's tables there.
    home = tmp_path_factory.mktemp("embeddings-server-home")
    proc = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "tests.servers.openai_embeddings"], cwd=ROOT,
        stdout=subprocess.PIPE, text=True, env={**os.environ, **home_environment(home)})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        pytest.fail(f"the embeddings test server did not start: {line!r}")
    yield Server(proc, int(line))
    proc.kill()  # a request it is still hanging on must not hold the suite's end
    proc.wait(10)


@pytest.fixture
def server(server_process: Server) -> Server:
    server_process.control()  # every test starts with a server that answers, no key
    return server_process


def http_config(server: Server, **changes: Any) -> EmbeddingsConfig:
    """Short time-outs and back-offs: a failing endpoint costs a test a fraction of a
    second."""
    cfg = EmbeddingsConfig(provider="openai", url=server.url, model="test-model",
                           timeout=10.0, retries=2, backoff=0.01, max_wait=30.0)
    return replace(cfg, **changes)


class Waits:
    """Stands in for time.sleep between retries: records each wait, waits none."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture(params=["builtin", "openai"])
def embedder(request: pytest.FixtureRequest) -> Any:
    if request.param == "builtin":
        found = open_embedder(EmbeddingsConfig())
    else:
        found = open_embedder(http_config(request.getfixturevalue("server"), batch_size=2))
    assert found is not None
    return found


# -- the contract every provider keeps ------------------------------------------------

def test_rows_are_unit_vectors_and_empty_text_a_zero_row(embedder: Any) -> None:
    out = embedder.embed(TEXTS + ["   "])
    assert out.dtype == np.float32 and out.shape == (len(TEXTS) + 1, embedder.model.dims)
    norms = np.linalg.norm(out, axis=1)
    assert np.allclose(norms[[0, 2, 3, 4, 5]], 1.0, atol=1e-5)
    assert not out[1].any() and not out[-1].any()
    assert embedder.embed([]).shape == (0, embedder.model.dims)


def test_similar_texts_score_above_unrelated_ones(embedder: Any) -> None:
    a, b, c = embedder.embed([*SIMILAR, UNRELATED])
    assert float(a @ b) > float(a @ c) + 0.05 and float(b @ a) > float(b @ c) + 0.05


def test_deterministic_and_independent_of_batch_and_order(embedder: Any) -> None:
    together = embedder.embed(TEXTS)
    again = embedder.embed(TEXTS)
    one_by_one = np.stack([embedder.embed([t])[0] for t in TEXTS])
    backwards = embedder.embed(TEXTS[::-1])[::-1]
    assert np.array_equal(together, again)
    assert np.allclose(together, one_by_one, atol=1e-6)
    assert np.allclose(together, backwards, atol=1e-6)


def test_the_endpoint_gives_the_vectors_it_serves(server: Server) -> None:
    """Sent in batches, answered in another order: each vector is its own text's."""
    served = open_embedder(http_config(server, batch_size=4))
    assert served is not None
    server.control("shuffle", "shuffle")
    assert np.allclose(served.embed(TEXTS), builtin.load().embed(TEXTS), atol=1e-6)
    log = server.log()
    assert [r["inputs"] for r in log] == [4, 1]  # the empty text is never sent
    assert all(r["dimensions"] is None and r["encoding_format"] == "float" for r in log)
    assert all(not r["sent_authorization"] for r in log)


def test_model_identity_and_dimensions(server: Server) -> None:
    assert open_embedder(EmbeddingsConfig()).model == builtin.MODEL  # type: ignore[union-attr]
    learned = OpenAIEmbedder(http_config(server))
    assert learned.model == ModelId("openai", "test-model", 256)  # from its first answer
    asked = OpenAIEmbedder(http_config(server, dimensions=64))
    assert asked.embed(["hello"]).shape == (1, 64)
    assert asked.model == ModelId("openai", "test-model", 64)
    assert server.log()[-1]["dimensions"] == 64
    assert open_embedder(EmbeddingsConfig(provider="none")) is None


@pytest.mark.long  # importing the SDK takes seconds; the server changes seldom
def test_the_official_sdk_reads_the_test_server(server: Server) -> None:
    """The test server speaks the protocol mem claims to speak: OpenAI's own client
    parses its answers, in both encodings."""
    import openai

    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    want = builtin.load().embed(SIMILAR)
    default = client.embeddings.create(model="test-model", input=list(SIMILAR))
    floats = client.embeddings.create(model="test-model", input=list(SIMILAR),
                                      encoding_format="float", dimensions=32)
    assert [d.index for d in default.data] == [0, 1]
    assert np.allclose([d.embedding for d in default.data], want, atol=1e-6)
    assert len(floats.data[0].embedding) == 32 and floats.usage.total_tokens > 0
    server.control("401")
    with pytest.raises(openai.AuthenticationError):
        client.embeddings.create(model="test-model", input="x")


# -- each failure: one error, its exit code, nothing half-done ------------------------

FAILURES = [
    # (the server's behaviour for every try, the error, its exit code)
    ("401", EmbeddingsUnavailable, 78),
    ("403", EmbeddingsUnavailable, 78),
    ("404", EmbeddingsUnavailable, 78),
    ("429", EmbeddingsError, 75),
    ("500", EmbeddingsError, 75),
    ("503", EmbeddingsError, 75),
    ("hang", EmbeddingsError, 75),
    ("close", EmbeddingsError, 75),
    ("dims", EmbeddingsDataError, 65),
    ("count", EmbeddingsDataError, 65),
    ("dup-index", EmbeddingsDataError, 65),
    ("malformed", EmbeddingsDataError, 65),
    ("huge", EmbeddingsDataError, 65),  # an answer is bounded in size
]


@pytest.mark.parametrize(("behaviour", "error", "code"), FAILURES)
def test_each_failure_is_one_documented_error(server: Server, behaviour: str,
                                              error: type[Exception], code: int) -> None:
    waits = Waits()
    hang = behaviour == "hang"  # a short time-out for it alone: a loaded machine is slow
    served = OpenAIEmbedder(http_config(server, batch_size=2, timeout=1.0 if hang else 10.0,
                                        dimensions=256), sleep=waits)
    # The second batch fails: nothing of the first is returned either.
    server.control(*([] if hang else ["ok"]), *[behaviour] * 6, hang=3.0)
    with pytest.raises(EmbeddingsError) as caught:
        served.embed(TEXTS)
    assert type(caught.value) is error and caught.value.exit_code == code
    assert "\n" not in caught.value.message and server.base in caught.value.message
    passing = code == 75
    # Retried only what may pass (a kept connection closed is tried once more afresh).
    tries = 3 + (behaviour == "close") if passing else 1
    assert len(server.log()) == tries + (not hang)
    assert len(waits.waits) == (2 if passing else 0)
    # Nothing is lost: the same embedder, asked again, gives every vector.
    server.control()
    assert np.allclose(served.embed(TEXTS), builtin.load().embed(TEXTS), atol=1e-6)


def test_an_endpoint_not_running_is_try_again_later(server: Server) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = http_config(server, url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(EmbeddingsError) as caught:
        OpenAIEmbedder(cfg, sleep=Waits()).embed(["hello"])
    assert type(caught.value) is EmbeddingsError and caught.value.exit_code == 75
    assert "refused the connection" in caught.value.message


def test_retries_back_off_and_honour_retry_after(server: Server) -> None:
    waits = Waits()
    served = OpenAIEmbedder(http_config(server, retries=4, backoff=0.5, max_wait=100),
                            sleep=waits)
    server.control("429", "500", "429", retry_after="7")
    assert served.embed(["hello"]).shape == (1, 256)
    assert waits.waits[0] == 7.0 and waits.waits[2] == 7.0
    assert 0.5 <= waits.waits[1] <= 1.5  # the second back-off, 2 × 0.5 s, with jitter
    waits.waits.clear()
    server.control("429", retry_after=formatdate(time.time() + 30, usegmt=True))
    served.embed(["hello"])
    assert 20 <= waits.waits[0] <= 31  # an HTTP date
    waits.waits.clear()
    server.control("429", retry_after="86400")
    served.embed(["hello"])
    assert waits.waits == [RETRY_AFTER_CAP]  # capped


def test_retries_stop_within_max_wait(server: Server) -> None:
    served = OpenAIEmbedder(http_config(server, retries=10, max_wait=5.0), sleep=Waits())
    server.control("429", retry_after="30")  # a wait past max_wait: give up at once
    with pytest.raises(EmbeddingsError, match="gave up after 1 tries in 5s"):
        served.embed(["hello"])


# -- the API key ----------------------------------------------------------------------

def key_command(tmp_path: Path, key: str) -> tuple[str, Path]:
    """A key command that prints `key` and leaves its environment in a file."""
    seen = tmp_path / "key-command-env.json"
    script = tmp_path / "print-key"
    script.write_text(f"#!{sys.executable}\nimport json, os\n"
                      f"open({str(seen)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
                      f"print({key!r})\n")
    script.chmod(0o700)
    return str(script), seen


def test_the_key_reaches_the_endpoint_and_nothing_else(
        server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MEM_MASTER_KEY", "not-for-children")
    server.control(key=KEY)
    command, seen = key_command(tmp_path, KEY)
    served = OpenAIEmbedder(http_config(server, key_command=command))
    assert served.embed(["hello"]).shape == (1, 256)
    assert server.log()[0]["authorized"]
    child_env = json.loads(seen.read_text())
    assert not any(k.startswith("MEM_") for k in child_env)
    assert KEY not in repr(served) and KEY not in repr(vars(served).get("cfg"))

    # A key the endpoint refuses: it echoes it, mem's error does not.
    wrong = "sk-wrong-Hq2mS9d"
    command, seen = key_command(tmp_path, wrong)
    with pytest.raises(EmbeddingsUnavailable) as caught:
        OpenAIEmbedder(http_config(server, key_command=command)).embed(["hello"])
    assert caught.value.exit_code == 78 and "refused the API key" in caught.value.message
    assert wrong not in str(caught.value) and KEY not in json.loads(seen.read_text()).values()
    out, err = capfd.readouterr()
    assert KEY not in caplog.text + out + err and wrong not in caplog.text + out + err


def test_the_key_from_a_named_variable(server: Server,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    server.control(key=KEY)
    cfg = http_config(server, key_env="TEST_EMBEDDINGS_KEY")
    with pytest.raises(EmbeddingsUnavailable, match="TEST_EMBEDDINGS_KEY"):
        OpenAIEmbedder(cfg).embed(["hello"])
    monkeypatch.setenv("TEST_EMBEDDINGS_KEY", KEY)
    assert OpenAIEmbedder(cfg).embed(["hello"]).shape == (1, 256)


@pytest.mark.parametrize(("command", "why"), [
    ("false", "exited with status 1"), ("no-such-command-here", "cannot be started"),
    ("echo two words", "is not an API key")])
def test_a_failing_key_command_is_a_config_error(server: Server, command: str,
                                                 why: str) -> None:
    with pytest.raises(EmbeddingsUnavailable, match=why) as caught:
        OpenAIEmbedder(http_config(server, key_command=command)).embed(["hello"])
    assert caught.value.exit_code == 78 and server.log() == []  # nothing was sent


# -- the built-in model's files ---------------------------------------------------------

@pytest.fixture
def model_files(tmp_path: Path) -> tuple[Path, Path]:
    root = builtin.package_dir()
    weights, tokenizer = tmp_path / "weights.safetensors", tmp_path / "tokenizer.json"
    shutil.copyfile(root / builtin.WEIGHTS, weights)
    shutil.copyfile(root / builtin.TOKENIZER, tokenizer)
    return weights, tokenizer


def test_the_copied_model_loads_and_embeds(model_files: tuple[Path, Path]) -> None:
    model = builtin.StaticModel(*model_files)
    assert np.array_equal(model.embed(TEXTS), builtin.load().embed(TEXTS))


@pytest.mark.parametrize("damage", ["truncated", "header", "tokenizer", "values"])
def test_damaged_model_files_are_one_data_error(model_files: tuple[Path, Path],
                                                damage: str) -> None:
    weights, tokenizer = model_files
    if damage == "truncated":
        with weights.open("r+b") as f:
            f.truncate(weights.stat().st_size // 2)
    elif damage == "header":
        with weights.open("r+b") as f:
            f.seek(8)
            f.write(b"\x00garbage" * 4)
    elif damage == "tokenizer":
        tokenizer.write_text('{"model": {"type": "BPE", "vocab": ')
    else:  # every weight a NaN (float16 0xFFFF), the header intact
        size = weights.stat().st_size
        with weights.open("r+b") as f:
            (header,) = np.frombuffer(f.read(8), dtype="<u8")
            f.seek(8 + int(header))
            f.write(b"\xff" * (size - 8 - int(header)))
    with pytest.raises(DataError) as caught:
        builtin.StaticModel(weights, tokenizer).embed(TEXTS)
    assert isinstance(caught.value, EmbeddingsDataError) and caught.value.exit_code == 65
    assert "damaged" in caught.value.message and "\n" not in caught.value.message


# -- configuration ----------------------------------------------------------------------

def write_config(config_dir: Path, text: str) -> None:
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.yaml").write_text(text)


def test_embeddings_settings_and_where_they_came_from(
        config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEM_EMBEDDINGS_BACKGROUND")  # conftest turns it off for every test
    s = resolve()
    assert s.embeddings == EmbeddingsConfig() and s.sources["embeddings"] == "default"
    write_config(config_dir, "embeddings:\n  provider: openai\n"
                 "  url: http://localhost:11434/v1\n  model: nomic-embed-text\n"
                 "  key_command: [pass, show, embeddings]\n  background: false\n")
    s = resolve()
    assert (s.embeddings.provider, s.embeddings.model, s.embeddings.key_command,
            s.embeddings.background) == ("openai", "nomic-embed-text",
                                         "pass show embeddings", False)
    assert s.sources["embeddings"].startswith("file ")
    monkeypatch.setenv("MEM_EMBEDDINGS_PROVIDER", "none")
    monkeypatch.setenv("MEM_EMBEDDINGS_DIMENSIONS", "512")
    s = resolve()
    assert (s.embeddings.provider, s.embeddings.dimensions) == ("none", 512)
    assert s.sources["embeddings"].startswith(
        "env MEM_EMBEDDINGS_PROVIDER, env MEM_EMBEDDINGS_DIMENSIONS, file ")


@pytest.mark.parametrize(("text", "said"), [
    ("embeddings:\n  provider: openai\n  model: m\n", "url is needed"),
    ("embeddings:\n  provider: openai\n  url: ftp://x\n  model: m\n", "http://"),
    ("embeddings:\n  provider: openai\n  url: http://u:pw@x/v1\n  model: m\n",
     "credentials"),
    ("embeddings:\n  api_key: sk-123\n", "must not hold the API key"),
    ("embeddings:\n  key_command: a\n  key_env: B\n", "keep one"),
    ("embeddings:\n  key_env: 'not a name'\n", "name of an environment variable"),
    ("embeddings:\n  provider: elsewhere\n", "expected one of builtin, openai, none"),
    ("embeddings:\n  batch_size: 0\n", "batch_size"),
    ("embeddings:\n  background: maybe\n", "true or false"),
])
def test_bad_embeddings_settings_are_config_errors(config_dir: Path, text: str,
                                                   said: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEM_EMBEDDINGS_BACKGROUND")  # conftest turns it off for every test
    write_config(config_dir, text)
    with pytest.raises(ConfigError, match=said) as caught:
        resolve()
    assert "sk-123" not in caught.value.message


def test_config_show_names_the_provider(config_dir: Path, script_runner: ScriptRunner,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEM_EMBEDDINGS_BACKGROUND")  # conftest turns it off for every test
    write_config(config_dir, "embeddings:\n  provider: none\n")
    monkeypatch.setenv("TEST_EMBEDDINGS_KEY", KEY)
    done = mem(script_runner, "config", "show", "--json")
    assert done.returncode == 0 and KEY not in done.stdout
    shown = json.loads(done.stdout)["settings"]["embeddings"]
    assert shown["value"]["provider"] == "none" and shown["source"].startswith("file ")
    write_config(config_dir, "embeddings:\n  provider: openai\n")
    done = mem(script_runner, "config", "show")
    assert done.returncode == 78
    assert "embeddings.url is needed" in one_error_line(done.stderr)


# -- an endpoint that trickles: the whole exchange has a deadline ------------------------

TRICKLE = 0.05  # seconds between two bytes: each read gets one well within any time-out


def trickling_config(server: Server, **changes: Any) -> EmbeddingsConfig:
    """Time-outs far above the trickle's pace: a per-read time-out never fires."""
    return http_config(server, timeout=0.5, retries=1, backoff=0.01, max_wait=1.5,
                       **changes)


@pytest.mark.parametrize("behaviour", ["trickle", "trickle-head"])
def test_an_answer_that_trickles_is_cut_at_its_deadline(server: Server,
                                                        behaviour: str) -> None:
    """One byte every 50 ms would take minutes to give a whole answer (and an endless
    trickle forever): each request ends at its `timeout`, the batch within `max_wait`."""
    served = OpenAIEmbedder(trickling_config(server), sleep=Waits())
    server.control(*[behaviour] * 4, trickle=TRICKLE)
    started = time.monotonic()
    with pytest.raises(EmbeddingsError) as caught:
        served.embed(["hello"])
    took = time.monotonic() - started
    assert type(caught.value) is EmbeddingsError and caught.value.exit_code == 75
    assert "did not answer within 0.5s" in caught.value.message
    assert took < 6, took  # 2 tries of 0.5 s; the trickle would take minutes
    assert len(server.log()) == 2
    server.control()
    assert served.embed(["hello"]).shape == (1, 256)  # the next request is a fresh one


def endpoint_config(config_dir: Path, url: str, **extra: Any) -> None:
    settings = {"provider": "openai", "url": url, "model": "test-model", "timeout": 0.5,
                "retries": 1, "backoff": 0.01, "max_wait": 1.5, **extra}
    write_config(config_dir, "embeddings:\n" + "".join(
        f"  {k}: {json.dumps(v)}\n" for k, v in settings.items()))


def embedded_by_endpoint(vault: Vault, server: Server, config_dir: Path,
                         script_runner: ScriptRunner) -> str:
    """A memory, embedded by the test server; its id."""
    added = remember.add(vault, HERBS, "fact").record.memory_id
    endpoint_config(config_dir, server.url)
    done = mem(script_runner, "embed", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["embedded"] == 1
    return added


def searched(script_runner: ScriptRunner, *args: str) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    done = mem(script_runner, "search", *args, "--json")
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc, took


@pytest.mark.parametrize("behaviour", ["trickle", "trickle-head"])
def test_search_answers_by_words_when_the_endpoint_trickles(
        server: Server, vault: Vault, config_dir: Path, script_runner: ScriptRunner,
        behaviour: str) -> None:
    added = embedded_by_endpoint(vault, server, config_dir, script_runner)
    server.control(*[behaviour] * 8, trickle=TRICKLE)
    doc, took = searched(script_runner, "basil balcony")
    assert took < 8, took  # max_wait 1.5 s, not the minutes of the trickle
    assert [r["memory_id"] for r in doc["results"]] == [added]
    assert doc["mode"] == "lexical"
    assert "did not answer within" in doc["notice"] and \
        doc["notice"].endswith("ranked by words only")
    # Said on the terminal too, in one line.
    server.control(*[behaviour] * 8, trickle=TRICKLE)
    done = mem(script_runner, "search", "basil balcony")
    assert done.returncode == 0 and "basil" in done.stdout
    assert done.stderr.startswith("note: ") and "ranked by words only" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_mcp_search_says_it_answered_by_words(server: Server, vault: Vault,
                                              config_dir: Path,
                                              script_runner: ScriptRunner) -> None:
    pytest.importorskip("mcp", reason="the optional extra memvault[mcp] is not installed")
    import anyio
    from mcp.client import Client

    from memvault.integrations import mcp_server

    added = embedded_by_endpoint(vault, server, config_dir, script_runner)
    server.control(*["trickle"] * 4, trickle=TRICKLE)
    found: dict[str, Any] = {}

    async def main() -> None:
        async with Client(mcp_server.build(Vault(resolve()))) as client:
            found.update((await client.call_tool(
                "memory_search", {"query": "basil balcony"})).structured_content)

    started = time.monotonic()
    anyio.run(main)
    assert time.monotonic() - started < 8
    assert [r["memory_id"] for r in found["results"]] == [added]
    assert "ranked by words only" in found["notice"]


# -- an endpoint that echoes the key, in any form ---------------------------------------

# A key with the characters that percent-encoding, JSON and HTML each write otherwise.
ODD_KEY = 'sk-Qx7/Lm+Tz=9"Kp\\Wd~42&<b>R8vYc'


def leaks(text: str, key: str) -> list[str]:
    """The forms of `key` an endpoint may echo that show in `text`: whole, or any ten
    characters of one (case aside)."""
    folded = text.casefold()
    return [name for name, form in echoed(key).items()
            if any(form[i:i + 10].casefold() in folded
                   for i in range(max(1, len(form) - 9)))]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 429, 500])
def test_no_form_of_an_echoed_key_reaches_an_error(server: Server, status: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever an endpoint says back goes nowhere: an error names the status and what it
    means, never a word of the answer's body (where an endpoint echoes the key: upper-
    cased, percent-encoded, base64 of it or of its Authorization or basic-auth form,
    hex, JSON- or HTML-escaped, or a part of it)."""
    monkeypatch.setenv("TEST_EMBEDDINGS_KEY", ODD_KEY)
    cfg = http_config(server, key_env="TEST_EMBEDDINGS_KEY", retries=0)
    for form in echoed(ODD_KEY):
        server.control(f"echo:{status}:{form}")
        with pytest.raises(EmbeddingsError) as caught:
            OpenAIEmbedder(cfg, sleep=Waits()).embed(["hello"])
        said = str(caught.value)
        assert f"HTTP {status}" in said and server.base in said, form
        assert "was not accepted" not in said, form  # nothing of the body
        assert leaks(said, ODD_KEY) == [], form
        assert server.log()[0]["authorized"], form  # the key was sent, and echoed


@pytest.mark.script_launch_mode("subprocess")
def test_an_echoed_key_stays_out_of_the_hook_log(server: Server, vault: Vault,
                                                 config_dir: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook's background ingest embeds what it stored; the endpoint refuses the key
    and echoes it upper-cased: hooks.log says the key was refused, and nothing of it."""
    log_dir = tmp_path / "logs"
    monkeypatch.setenv("MEM_LOG_DIR", str(log_dir))
    monkeypatch.setenv("MEM_EMBEDDINGS_BACKGROUND", "true")
    monkeypatch.setenv("TEST_EMBEDDINGS_KEY", ODD_KEY)
    endpoint_config(config_dir, server.url, key_env="TEST_EMBEDDINGS_KEY")
    server.control(*["echo:401:upper"] * 4)
    log = hook_ingest(tmp_path)
    assert "refused the API key (HTTP 401)" in log
    assert leaks(log, ODD_KEY) == []
    assert len(server.log()) == 1 and server.log()[0]["authorized"]


SESSION = "5f0c2a8e-3b1d-4c6f-9a7e-2d8b1c4e6f00"


def hook_ingest(tmp_path: Path) -> str:
    """A Claude Code SessionEnd through `mem hook`, its background ingest waited for; the
    hook log."""
    transcript = tmp_path / "t" / f"{SESSION}.jsonl"
    transcript.parent.mkdir()
    shutil.copy(ROOT / "tests" / "fixtures" / "transcripts" / "claude-code.jsonl", transcript)
    payload = {"session_id": SESSION, "transcript_path": str(transcript),
               "hook_event_name": "SessionEnd", "reason": "exit"}
    done = subprocess.run([str(MEM), "hook", "claude-code"], input=json.dumps(payload),
                          text=True, capture_output=True, timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    deadline = time.monotonic() + 60
    while children(tmp_path):
        assert time.monotonic() < deadline, "the background ingest did not finish"
        time.sleep(0.1)
    return (Path(os.environ["MEM_LOG_DIR"]) / "hooks.log").read_text()


def children(marker: Path) -> list[int]:
    """mem processes this test started in the background (their argv names its tmp dir)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(str(marker).encode() in a for a in argv) and b"ingest" in argv:
                pids.append(int(proc.name))
    return pids


# -- embeddings.url: checked when the configuration is read -------------------------------

BAD_URLS = [
    "http://[::1/v1",  # an IPv6 literal not closed
    "http://[::1]:99999/v1", "http://127.0.0.1:99999/v1", "http://localhost:0/v1",
    "http://localhost:port/v1", "http://localhost:-1/v1",  # ports
    "http://[zz::1]/v1", "http://[127.0.0.1]/v1",  # not IPv6 literals
    "http:///v1", "http://:8080/v1", "http://", "localhost:11434/v1",
    "//localhost/v1",  # no host, no scheme
    "ftp://localhost/v1", "file:///v1", "javascript:alert(1)",  # not HTTP
    "http://local host/v1", "http://localhost/v 1", "http://localhost/v1\n",
    "http://localhost/\tv1", "http://localhost/v1\x00", "http://localhost/v1\x7f",
    " http://localhost/v1",  # spaces and control characters
    "http://lócalhost/v1", "http://localhost/vé",  # not ASCII
    "http://bad..host/v1", "http://-bad.host/v1", "http://bad_host!/v1",  # names
    "http://user:sk-secret@localhost/v1", "http://sk-secret@localhost/v1",
    "http://@localhost/v1", "http://localhost/v1?api_key=sk-secret",
    "http://localhost/v1?x=1&Token=sk-secret",  # credentials
    "http://localhost/v1#part",  # a fragment is never sent
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_malformed_url_is_a_config_error_naming_the_setting(
        config_dir: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(config_dir, "embeddings:\n  provider: openai\n  model: m\n  url: "
                 + json.dumps(url) + "\n")
    with pytest.raises(ConfigError) as caught:
        resolve()
    said = caught.value.message
    assert said.startswith("embeddings.url ") and "\n" not in said
    assert "sk-secret" not in said  # the value is not repeated: it may hold a secret
    if "\x00" in url:
        return  # no environment variable holds a NUL
    write_config(config_dir, "embeddings:\n  provider: openai\n  model: m\n")
    monkeypatch.setenv("MEM_EMBEDDINGS_URL", url)
    with pytest.raises(ConfigError, match="MEM_EMBEDDINGS_URL"):
        resolve()


@pytest.mark.parametrize("url", [
    "http://localhost:11434/v1", "https://api.openai.com/v1/", "http://[::1]:8080/v1",
    "http://127.0.0.1/v1", "HTTP://Embed.Example.COM:443/v1", "http://tei_server/",
    "https://x.openai.azure.com/openai/deployments/d?api-version=2024-02-01",
    "http://xn--lcalhost-5za/v1", "http://localhost:/v1"])
def test_well_formed_urls_are_taken(config_dir: Path, url: str) -> None:
    write_config(config_dir, "embeddings:\n  provider: openai\n  model: m\n  url: "
                 + json.dumps(url) + "\n")
    assert resolve().embeddings.url == url
    assert OpenAIEmbedder(resolve().embeddings).where == url.rstrip("/")


@pytest.mark.parametrize("url", ["http://[::1/v1", "http://127.0.0.1:99999/v1"])
def test_every_command_says_which_setting(config_dir: Path, vault: Vault, url: str,
                                          script_runner: ScriptRunner) -> None:
    remember.add(vault, HERBS, "fact")
    write_config(config_dir, "embeddings:\n  provider: openai\n  model: m\n  url: "
                 + json.dumps(url) + "\n")
    for args in (("search", "basil"), ("embed",), ("show", "x"), ("brief",)):
        done = mem(script_runner, *args)
        assert done.returncode == 78, (args, done.stderr)
        assert "embeddings.url" in one_error_line(done.stderr), args


@pytest.mark.script_launch_mode("subprocess")
@pytest.mark.parametrize("url", ["http://[::1/v1", "http://127.0.0.1:99999/v1",
                                 "ftp://localhost/v1"])
def test_a_hook_gives_its_brief_whatever_the_url(config_dir: Path, vault: Vault, url: str,
                                                  tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    remember.add(vault, "Always answer in British English", "preference")
    monkeypatch.setenv("MEM_LOG_DIR", str(tmp_path / "logs"))
    write_config(config_dir, "embeddings:\n  provider: openai\n  model: m\n  url: "
                 + json.dumps(url) + "\n")
    done = subprocess.run([str(MEM), "hook", "claude-code"], input=json.dumps(
        {"hook_event_name": "SessionStart", "source": "startup"}), text=True,
        capture_output=True, timeout=30, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    brief = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "British English" in brief


@pytest.mark.script_launch_mode("subprocess")
def test_a_hook_ingest_stores_the_session_whatever_the_url(
        config_dir: Path, vault: Vault, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The background ingest stores the transcript; the embedding it cannot do is said
    in the hook log, naming the setting."""
    monkeypatch.setenv("MEM_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("MEM_EMBEDDINGS_BACKGROUND", "true")
    write_config(config_dir, "embeddings:\n  provider: openai\n  model: m\n"
                 "  url: 'http://[::1/v1'\n")
    log = hook_ingest(tmp_path)
    assert "not embedded, left pending: embeddings.url" in log
    assert "unexpected" not in log and "failed" not in log
    write_config(config_dir, "")
    assert Vault(resolve()).state().live["message"] == 13


def test_an_unreachable_endpoint_never_stops_a_search(
        server: Server, vault: Vault, config_dir: Path,
        script_runner: ScriptRunner) -> None:
    """Vectors made by an endpoint; the endpoint gone (nothing listens, or its name is
    not found): search answers by words, and says why, whatever the dimensions."""
    added = embedded_by_endpoint(vault, server, config_dir, script_runner)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    for url, why in ((closed, "refused the connection"),
                     ("http://mem-test.invalid/v1", "could not be reached")):
        for dims in ({}, {"dimensions": 256}):
            endpoint_config(config_dir, url, **dims)
            doc, took = searched(script_runner, "basil balcony")
            assert [r["memory_id"] for r in doc["results"]] == [added], (url, dims)
            assert doc["mode"] == "lexical" and why in doc["notice"], (url, dims)
            assert took < 8


@pytest.mark.script_launch_mode("subprocess")
def test_a_pool_worker_reads_the_key_key_env_names_even_a_mem_one(
        server: Server, vault: Vault, config_dir: Path, script_runner: ScriptRunner,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`mem embed --all-users --jobs N`: a worker has no MEM_* variable but the one
    embeddings.key_env names; unset, the pool says so in the line the walk in-process
    says (78), not as a worker's crash."""
    from tests.conftest import open_as

    for user in ("alice", "bob", "carol"):
        remember.add(open_as(user), f"{user}: {HERBS}", "fact")
    endpoint_config(config_dir, server.url, key_env="MEM_TEST_EMBEDDINGS_KEY")
    lines = []
    for jobs in ("1", "2"):
        done = mem(script_runner, "embed", "--all-users", "--jobs", jobs, "--json")
        assert done.returncode == 78, (jobs, done.stderr)
        lines.append(one_error_line(done.stderr))
    assert lines[0] == lines[1] and "MEM_TEST_EMBEDDINGS_KEY" in lines[0], lines
    server.control(key=ODD_KEY)
    monkeypatch.setenv("MEM_TEST_EMBEDDINGS_KEY", ODD_KEY)
    done = mem(script_runner, "embed", "--all-users", "--jobs", "2", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["embedded"] == 3
    assert server.log() and all(r["authorized"] for r in server.log())
