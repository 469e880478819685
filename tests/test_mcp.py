"""`mem mcp`: the memory tools driven through the SDK's in-memory client (each tool's happy
path, refusals, per-session limits, annotations, size caps) and over a real stdio pipe
(stdout holds only the protocol; a store is visible to `mem search` in another process at
once). Skipped when the optional extra `memvault[mcp]` is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import pytest
from pytest_console_scripts import ScriptRunner

from memvault.config import resolve
from memvault.ops import remember
from memvault.ops.brief import WARNING
from memvault.vault.vault import Vault
from tests.conftest import mem, one_error_line

pytest.importorskip("mcp", reason="the optional extra memvault[mcp] is not installed")

from mcp.client import Client  # noqa: E402

from memvault.integrations import mcp_server  # noqa: E402
from memvault.ops.budget import Limits  # noqa: E402
from memvault.ops.projects import project_tag  # noqa: E402

MEM = Path(sys.executable).parent / "mem"
Session = Callable[[str, dict[str, Any]], Awaitable[Any]]


def drive(vault: Vault, script: Callable[[Session], Awaitable[None]],
          limits: Limits | None = None) -> None:
    """Run `script` against a fresh server session (one budget) for `vault`."""
    server = mcp_server.build(vault, limits)

    async def main() -> None:
        async with Client(server) as client:
            async def call(name: str, args: dict[str, Any]) -> Any:
                return await client.call_tool(name, args)
            await script(call)

    anyio.run(main)


def ok(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    doc = result.structured_content
    assert json.loads(result.content[0].text) == doc  # the text is the same document
    return dict(doc)


def error(result: Any) -> str:
    assert result.is_error
    text: str = result.content[0].text
    assert "Traceback" not in text and "--" not in text  # plain words, no flags
    return text


def test_the_tools_their_schemas_and_annotations(vault: Vault) -> None:
    server = mcp_server.build(vault)

    async def main() -> list[Any]:
        async with Client(server) as client:
            return list((await client.list_tools()).tools)

    tools = {t.name: t for t in anyio.run(main)}
    assert set(tools) == {"memory_store", "memory_search", "memory_brief", "memory_get",
                          "memory_delete"}
    for name, tool in tools.items():
        props = tool.input_schema.get("properties", {})
        assert not {"user", "org", "vault"} & set(props), name  # one user, fixed at start
        assert tool.output_schema and tool.output_schema["type"] == "object", name
        assert tool.annotations.open_world_hint is False, name
        # What a model reads to decide on a call: plain sentences, no docstring left-overs.
        text = tool.description
        assert text and text[0].isupper() and text.endswith("."), name
        assert "\n" not in text and "  " not in text and "Args:" not in text, name
        assert all(p.get("description") for p in props.values()), name
    for name in ("memory_search", "memory_brief", "memory_get"):
        assert tools[name].annotations.read_only_hint is True
    store, delete = tools["memory_store"], tools["memory_delete"]
    assert store.annotations.read_only_hint is False
    assert store.annotations.destructive_hint is False
    assert delete.annotations.destructive_hint is True
    assert delete.meta == {"anthropic/requiresUserInteraction": True}
    assert store.input_schema["required"] == ["type", "content"]
    assert store.input_schema["properties"]["content"]["maxLength"] == \
        mcp_server.MAX_STORE_CHARS
    assert "message" not in str(store.input_schema["properties"]["type"])
    assert tools["memory_search"].input_schema["properties"]["limit"]["maximum"] == \
        mcp_server.MAX_RESULTS


def test_store_search_get_brief_delete(script_runner: ScriptRunner, vault: Vault) -> None:
    seen: dict[str, Any] = {}

    async def script(call: Session) -> None:
        stored = ok(await call("memory_store", {
            "type": "preference", "content": "Prefers uv over pip; write to bob@example.com",
            "tags": ["python"]}))
        assert stored["behavioral"] and not stored["deduplicated"]
        assert stored["masked"] and "bob@example.com" not in stored["content"]
        assert stored["stores_left"] == 19
        again = ok(await call("memory_store", {
            "type": "preference", "content": "Prefers uv over pip; write to bob@example.com"}))
        assert again["deduplicated"] and again["memory_id"] == stored["memory_id"]
        assert again["stores_left"] == 19  # nothing written, nothing spent
        fact = ok(await call("memory_store", {"type": "fact",
                                              "content": "Works on the billing service"}))

        found = ok(await call("memory_search", {"query": "uv"}))
        (hit,) = found["results"]
        assert hit["memory_id"] == stored["memory_id"] and hit["behavioral"]
        assert hit["provenance"]["origin"] == "stored"
        assert found["warning"] == WARNING  # travels with behavioral entries
        plain = ok(await call("memory_search", {"query": "billing"}))
        assert plain["warning"] is None and plain["results"][0]["memory_id"] == \
            fact["memory_id"]
        recent = ok(await call("memory_search", {}))  # empty query: the most recent
        assert [r["memory_id"] for r in recent["results"]] == [fact["memory_id"],
                                                               stored["memory_id"]]
        filtered = ok(await call("memory_search", {"types": ["fact"], "limit": 5}))
        assert [r["type"] for r in filtered["results"]] == ["fact"]

        got = ok(await call("memory_get", {"memory_id": stored["memory_id"]}))
        assert got["memory"]["provenance"]["channel"] == "mcp"  # who stored it
        # The user's tags, and the keyed id of the project the server was started in.
        assert got["memory"]["tags"] == ["python", project_tag(vault, Path.cwd())]
        assert got["warning"] == WARNING

        brief = ok(await call("memory_brief", {}))
        assert brief["brief"].startswith('<mem-memory id="')
        assert '">\nReference data' in brief["brief"]
        assert "Prefers uv over pip" in brief["brief"] and brief["brief_count"] == 2

        newer = ok(await call("memory_store", {"type": "preference",
                                               "content": "Prefers poetry now",
                                               "supersedes": stored["memory_id"]}))
        assert newer["supersedes"] == stored["memory_id"]
        deleted = ok(await call("memory_delete", {"memory_id": fact["memory_id"]}))
        assert deleted["memory_ids"] == [fact["memory_id"]] and deleted["deletes_left"] == 4
        seen["newer"] = newer["memory_id"]

    drive(vault, script)
    # Another process sees the writes at once.
    doc = json.loads(mem(script_runner, "search", "poetry", "--json").stdout)
    assert [r["memory_id"] for r in doc["results"]] == [seen["newer"]]
    assert json.loads(mem(script_runner, "search", "billing", "--json").stdout)[
        "results"] == []
    assert json.loads(mem(script_runner, "search", "uv", "--json").stdout)["results"] == []


def test_a_replaced_memory_stored_again_is_current_again(
        script_runner: ScriptRunner, vault: Vault) -> None:
    async def script(call: Session) -> None:
        tea = ok(await call("memory_store", {"type": "preference", "content": "Prefers tea"}))
        coffee = ok(await call("memory_store", {"type": "preference",
                                                "content": "Prefers coffee",
                                                "supersedes": tea["memory_id"]}))
        again = ok(await call("memory_store", {"type": "preference",
                                               "content": "Prefers tea"}))
        assert not again["deduplicated"] and again["restated"] == tea["memory_id"]
        assert again["supersedes"] == coffee["memory_id"]
        found = ok(await call("memory_search", {"query": "prefers"}))
        assert [r["content"] for r in found["results"]] == ["Prefers tea"]
        brief = ok(await call("memory_brief", {}))["brief"]
        assert "Prefers tea" in brief and "Prefers coffee" not in brief

    drive(vault, script)
    doc = json.loads(mem(script_runner, "search", "prefers", "--json").stdout)
    assert [r["content"] for r in doc["results"]] == ["Prefers tea"]


def test_refusals_in_plain_words_and_nothing_stored(vault: Vault) -> None:
    async def script(call: Session) -> None:
        secret = "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
        text = error(await call("memory_store", {"type": "fact", "content": secret}))
        assert "holds a secret" in text and "wJalrXUt" not in text
        text = error(await call("memory_store", {"type": "fact", "content": "Hi",
                                                 "user": "bob"}))
        assert "takes no argument 'user'" in text
        text = error(await call("memory_store", {"type": "message", "content": "Hi"}))
        assert text.startswith("memory_store: invalid arguments (type:")
        long = "canarywombat " * 400
        text = error(await call("memory_store", {"type": "fact", "content": long}))
        assert "at most 4000 characters" in text and "canarywombat" not in text
        text = error(await call("memory_get", {"memory_id": "0190aaaa-0000-7000-8000-0000"}))
        assert text == "memory_get: no memory with id 0190aaaa-0000-7000-8000-0000"
        text = error(await call("memory_delete", {"memory_id": "../../etc/passwd"}))
        # The pattern quoted as it is, not lower-cased into another pattern.
        assert "memory_id: string should match pattern '^[0-9a-fA-F-]{8,64}$'" in text
        text = error(await call("memory_search", {"after": "yesterday"}))
        assert "invalid date or time" in text
        assert ok(await call("memory_search", {}))["results"] == []

    drive(vault, script)
    assert not (Path(resolve().vault) / "default" / "bob").exists()


def test_a_frozen_user_is_told_why_in_words(script_runner: ScriptRunner, vault: Vault) -> None:
    remember.add(vault, "Likes green tea", "preference")
    assert mem(script_runner, "freeze").returncode == 0

    async def script(call: Session) -> None:
        text = error(await call("memory_store", {"type": "fact", "content": "Hi there"}))
        assert "frozen" in text and "only they can unfreeze it" in text

    drive(vault, script)


def test_per_session_limits_and_their_config(vault: Vault, config_dir: Path) -> None:
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.yaml").write_text(
        "mcp:\n  max_stores: 3\n  max_supersedes: 1\n  max_deletes: 1\n")
    limits = Limits.from_settings(resolve())
    assert (limits.stores, limits.supersedes, limits.deletes) == (3, 1, 1)
    ids: list[str] = []

    async def script(call: Session) -> None:
        for n in range(3):
            ids.append(ok(await call("memory_store", {"type": "fact",
                                                      "content": f"Fact number {n}"}))[
                "memory_id"])
        text = error(await call("memory_store", {"type": "fact", "content": "One more"}))
        assert "used its 3 stores" in text
        ok(await call("memory_delete", {"memory_id": ids[0]}))
        assert "used its 1 deletes" in error(
            await call("memory_delete", {"memory_id": ids[1]}))

    drive(vault, script, limits)
    stored = [r.content for r in Vault(resolve()).fetch(ids[1:]).values()]
    assert sorted(stored) == ["Fact number 1", "Fact number 2"]

    async def fresh(call: Session) -> None:  # a new session has a new budget
        ok(await call("memory_store", {"type": "fact", "content": "Next session"}))
        text = error(await call("memory_store", {"type": "fact", "content": "Superseding",
                                                 "supersedes": "0190aaaa-0000-7000-8000-00"}))
        assert "no memory with id" in text  # refused by the vault: the budget is given back
        ok(await call("memory_store", {"type": "fact", "content": "Better fact",
                                       "supersedes": ids[1]}))
        text = error(await call("memory_store", {"type": "fact", "content": "Best fact",
                                                 "supersedes": ids[2]}))
        assert "used its 1 supersedes" in text

    drive(vault, fresh, Limits.from_settings(resolve()))
    (config_dir / "config.yaml").write_text("mcp:\n  max_stores: -1\n")
    with pytest.raises(Exception, match="mcp.max_stores"):
        Limits.from_settings(resolve())


def test_storing_a_replaced_memory_again_is_a_supersede(vault: Vault) -> None:
    """A session steered into flipping memories back by repeating them is held to the
    supersede limit like one that names what it replaces."""
    tea = remember.add(vault, "Prefers tea", "preference").record.memory_id
    remember.add(vault, "Prefers coffee", "preference", supersedes=tea)
    sage = remember.add(vault, "Prefers sage", "preference").record.memory_id
    remember.add(vault, "Prefers mint", "preference", supersedes=sage)

    async def script(call: Session) -> None:
        again = ok(await call("memory_store", {"type": "preference", "content": "Prefers tea"}))
        assert again["restated"] == tea
        text = error(await call("memory_store", {"type": "preference",
                                                 "content": "Prefers sage"}))
        assert "supersedes" in text and "replace" in text
        found = ok(await call("memory_search", {"query": "prefers", "limit": 10}))
        assert sorted(r["content"] for r in found["results"]) == ["Prefers mint",
                                                                  "Prefers tea"]

    drive(vault, script, Limits(stores=5, supersedes=1))


def test_results_stay_under_the_size_cap(vault: Vault) -> None:
    for n in range(8):
        remember.add(vault, f"Note {n} about the harbour: " + "lighthouse keeper " * 100,
                     "context")
    big = remember.add(vault, "Harbour manual " + "x" * 30000, "fact").record
    limits = Limits()

    async def script(call: Session) -> None:
        found = await call("memory_search", {"query": "harbour", "limit": 20})
        doc = ok(found)
        assert doc["truncated"] and 0 < len(doc["results"]) < 9
        assert len(found.content[0].text) <= limits.result_chars
        assert all(len(r["content"]) <= mcp_server.ENTRY_CHARS for r in doc["results"])
        got = await call("memory_get", {"memory_id": big.memory_id})
        assert ok(got)["memory"]["truncated"]
        assert len(got.content[0].text) <= limits.result_chars
        brief = await call("memory_brief", {})
        assert len(brief.content[0].text) <= limits.result_chars

    drive(vault, script, limits)


def test_the_servers_project_comes_first(vault: Vault, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """What a session stores carries its project; search and the brief put the current
    project's memories first."""
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    (alpha / ".git").mkdir(parents=True)
    (alpha / "src").mkdir()
    beta.mkdir()

    def store(where: Path, text: str) -> None:
        monkeypatch.chdir(where)

        async def script(call: Session) -> None:
            ok(await call("memory_store", {"type": "fact", "content": text}))

        drive(vault, script)

    store(alpha / "src", "The deploy target is the harbour cluster")  # alpha's work tree
    store(beta, "The deploy target is the lighthouse cluster")
    store(beta, "Beta deploys on Fridays")
    for where, first, other in ((alpha, "harbour", "lighthouse"),
                                (beta, "lighthouse", "harbour")):
        monkeypatch.chdir(where)

        async def look(call: Session, first: str = first, other: str = other) -> None:
            found = ok(await call("memory_search", {"query": "deploy target", "limit": 1}))
            assert first in found["results"][0]["content"]
            brief = ok(await call("memory_brief", {}))["brief"]
            assert brief.index(first) < brief.index(other)

        drive(vault, look)


# --- over a real stdio pipe ----------------------------------------------------------------


def rpc(method: str, params: dict[str, Any], ident: int | None) -> bytes:
    doc: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if ident is not None:
        doc["id"] = ident
    return (json.dumps(doc) + "\n").encode()


@pytest.mark.script_launch_mode("subprocess")
def test_stdio_holds_only_the_protocol_and_a_store_is_searchable_at_once(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    started = time.perf_counter()
    proc = subprocess.Popen([str(MEM), "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "MEM_LOG_DIR": str(tmp_path / "logs")})
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                        "clientInfo": {"name": "test", "version": "1"}}, 1))
    proc.stdin.flush()
    first = json.loads(proc.stdout.readline())
    assert first["id"] == 1 and first["result"]["serverInfo"] == {
        "name": "mem", "version": version("memvault")}
    assert time.perf_counter() - started < 30
    proc.stdin.write(rpc("notifications/initialized", {}, None))
    proc.stdin.write(rpc("tools/call", {"name": "memory_store", "arguments": {
        "type": "instruction", "content": "Always run the linter before committing"}}, 2))
    proc.stdin.flush()
    second = json.loads(proc.stdout.readline())
    assert second["id"] == 2 and second["result"]["isError"] is False
    # Visible to another process while the server still runs.
    doc = json.loads(mem(script_runner, "search", "linter", "--json").stdout)
    assert [r["memory_id"] for r in doc["results"]] == [
        second["result"]["structuredContent"]["memory_id"]]
    proc.stdin.write(rpc("tools/call", {"name": "memory_search",
                                        "arguments": {"query": "linter"}}, 3))
    proc.stdin.flush()
    third = json.loads(proc.stdout.readline())
    assert third["id"] == 3 and third["result"]["structuredContent"]["warning"]
    proc.stdin.close()
    assert proc.stdout.read() == b""  # nothing but the answers, one JSON-RPC line each
    assert proc.wait(timeout=30) == 0
    assert all(doc["jsonrpc"] == "2.0" for doc in (first, second, third))


class Wire:
    """`mem mcp` as a client sees it: lines in, answers out, each awaited at most `wait`
    seconds (a reader thread, so that a missing answer is a failure, not a hang)."""

    def __init__(self, tmp_path: Path, wait: float = 5) -> None:
        import queue
        import threading

        self.wait = wait
        self.proc = subprocess.Popen([str(MEM), "mcp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, "MEM_LOG_DIR": str(tmp_path / "logs")})
        self.answers: queue.Queue[bytes] = queue.Queue()
        out = self.proc.stdout
        assert out is not None
        threading.Thread(target=lambda: [self.answers.put(line) for line in out],
                         daemon=True).start()
        first = self.ask(rpc("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}, 1), wait=30)
        assert first["id"] == 1 and "result" in first
        self.send(rpc("notifications/initialized", {}, None))

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line)
        self.proc.stdin.flush()

    def ask(self, line: bytes, wait: float | None = None) -> dict[str, Any]:
        import queue

        self.send(line)
        try:
            answer: dict[str, Any] = json.loads(self.answers.get(timeout=wait or self.wait))
        except queue.Empty:
            raise AssertionError(f"no answer within {wait or self.wait} s to "
                                 f"{line[:120]!r}") from None
        return answer

    def close(self) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=30)
        return code, self.proc.stderr.read().decode()


def call_line(ident: Any, arguments: str, name: str = "memory_search") -> bytes:
    """A tools/call request written by hand, its arguments as raw JSON text."""
    return (f'{{"jsonrpc":"2.0","id":{ident},"method":"tools/call","params":'
            f'{{"name":"{name}","arguments":{arguments}}}}}\n').encode()


PARSE, INVALID = -32700, -32600
BAD_LINES: list[tuple[str, bytes, Any, int]] = [
    # what, the line, the id the answer carries, its code
    ("a lone high surrogate", call_line(5, r'{"query":"\ud800"}'), 5, PARSE),
    ("a lone low surrogate", call_line(6, r'{"query":"x\udc00y"}'), 6, PARSE),
    ("a lone surrogate in the id", b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}\n',
     None, PARSE),
    ("nesting past the parser's depth", call_line(7, '{"query":' + "[" * 300 + "]" * 300 + "}"),
     7, PARSE),
    ("nesting 100k deep", call_line('"deep"', '{"x":' + "[" * 100000), "deep", PARSE),
    ("a 5000-digit number", call_line(8, '{"limit":1' + "0" * 5000 + "}"), 8, PARSE),
    ("invalid UTF-8", call_line(9, '{"query":"cafX"}').replace(b"X", b"\xe9"),
     9, PARSE),
    ("not JSON", b"hello there\n", None, PARSE),
    ("a cut-off line", call_line(10, '{"query":"tea"')[:-3] + b"\n", 10, PARSE),
    ("missing its method", b'{"jsonrpc":"2.0","id":11}\n', 11, INVALID),
    ("missing jsonrpc", b'{"id":12,"method":"ping"}\n', 12, INVALID),
    ("a method that is a number", b'{"jsonrpc":"2.0","id":13,"method":7}\n', 13, INVALID),
    ("params as a list", b'{"jsonrpc":"2.0","id":14,"method":"ping","params":[1]}\n', 14,
     INVALID),
    ("a fractional id", b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}\n', None, INVALID),
    ("a null id", b'{"jsonrpc":"2.0","id":null,"method":"ping"}\n', None, INVALID),
    ("an escaped id key", b'{"jsonrpc":"2.0","\\u0069d":true,"method":"ping"}\n', None,
     INVALID),
    ("a batch", b'[{"jsonrpc":"2.0","id":15,"method":"ping"}]\n', None, INVALID),
    ("a bare value", b"42\n", None, INVALID),
    ("an oversized line", call_line(16, '{"query":"' + "a" * (2 << 20) + '"}'), 16, INVALID),
]


@pytest.mark.script_launch_mode("subprocess")
def test_every_line_a_client_sends_gets_an_answer_and_the_next_call_works(
        vault: Vault, tmp_path: Path) -> None:
    """A line the SDK's parser or validator refuses used to get no answer at all: the
    client waited out its time-out. Each gets a JSON-RPC error at once, with the request's
    id where it can be read, and the server goes on serving."""
    remember.add(vault, "Prefers green tea", "preference")
    wire = Wire(tmp_path)
    for n, (what, line, ident, code) in enumerate(BAD_LINES):
        answer = wire.ask(line)
        assert answer["jsonrpc"] == "2.0" and answer["id"] == ident, what
        assert answer["error"]["code"] == code, what
        assert "\n" not in answer["error"]["message"], what
        pong = wire.ask(rpc("ping", {}, 100 + n))  # the next request is served
        assert pong == {"jsonrpc": "2.0", "id": 100 + n, "result": {}}, what
    wire.send(b"\n")  # a blank line asks nothing: no answer, no harm
    found = wire.ask(call_line(200, '{"query":"tea"}'))
    assert found["id"] == 200
    assert [r["content"] for r in found["result"]["structuredContent"]["results"]] == [
        "Prefers green tea"]
    # A surrogate pair is a character: stored as sent.
    stored = wire.ask(call_line(201, r'{"type":"fact","content":"Smiles \ud83d\ude00"}',
                                "memory_store"))
    assert stored["result"]["structuredContent"]["content"] == "Smiles \U0001f600"
    code, stderr = wire.close()
    assert code == 0 and "Traceback" not in stderr


def test_what_the_sdk_takes_goes_through_unchanged_and_nothing_else() -> None:
    """The line filter itself: whatever the bytes, it never raises; it passes on only text
    the SDK reads as a message (and never a request it would read as a notification), and
    answers everything else."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from mcp_types import JSONRPCError, JSONRPCNotification, jsonrpc_message_adapter

    from memvault.integrations.mcp_stdio import screen
    from tests.conftest import examples

    good = call_line(3, '{"query":"tea"}')
    assert screen(good) == good.decode().rstrip("\n")
    pieces = st.sampled_from([b'"', b"\\", b"\\u", b"d800", b"{", b"}", b"[", b"]", b",",
                              b":", b'"id"', b"1e999", b"\xff", b"\x00", b"null", b"9" * 50])

    @settings(max_examples=examples(400))
    @given(st.binary(max_size=200) | st.builds(
        lambda cut, extra: good[:cut] + b"".join(extra) + good[cut:],
        st.integers(0, len(good)), st.lists(pieces, max_size=6)))
    def check(line: bytes) -> None:
        outcome = screen(line.replace(b"\n", b" ") + b"\n")
        if isinstance(outcome, str):
            message = jsonrpc_message_adapter.validate_json(outcome, by_name=False)
            if isinstance(message, JSONRPCNotification):
                assert "id" not in json.loads(outcome)
        elif outcome is None:
            assert not line.replace(b"\n", b" ").strip()
        else:
            assert isinstance(outcome, JSONRPCError)
            JSONRPCError.model_validate_json(outcome.model_dump_json())  # it can be sent

    check()


def test_mcp_without_a_vault_fails_before_serving(script_runner: ScriptRunner) -> None:
    result = mem(script_runner, "mcp")
    assert result.returncode == 66 and result.stdout == ""
    assert "run `mem init`" in one_error_line(result.stderr)


def test_mcp_without_the_sdk_says_how_to_install_it(
        script_runner: ScriptRunner, vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mcp" else real(name, *a))
    result = mem(script_runner, "mcp")
    assert result.returncode == 78 and result.stdout == ""
    assert "pip install 'memvault[mcp]'" in one_error_line(result.stderr)
