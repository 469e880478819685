"""Codex rollouts as Codex writes them today: recompressed with zstd (*.jsonl.zst), moved to
archived_sessions/, paginated threads' item_completed records beside their response_items,
and files of a gigabyte or more, read as a stream in flat memory and stored in batches."""

from __future__ import annotations

import io
import json
import random
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zstandard
from pytest_console_scripts import ScriptRunner

from memvault.errors import DataError
from memvault.model.records import NewMessage
from memvault.ops import ingest as core
from memvault.text import transcripts
from memvault.text.transcripts import (
    MAX_LINE,
    LongLine,
    Transcript,
    detect,
    detect_stream,
    parse,
    parse_stream,
)
from memvault.vault.vault import Vault
from tests.conftest import mem, one_error_line

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
PAGINATED_SID = "019a4c2e-7d10-7c3a-9e55-3f1d2c0b9a11"
ROLLOUT_SID = "0199a213-81c0-7800-8aa1-bbab2a035a53"
BIG_SID = "019b0000-0000-7000-8000-0000000000b1"
MiB = 1 << 20
Row = tuple[str, str, str | None, str | None]


@pytest.fixture(autouse=True)
def log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "logs"
    monkeypatch.setenv("MEM_LOG_DIR", str(path))
    return path


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def rows(messages: list[NewMessage]) -> list[Row]:
    return [(m.role, m.content, m.message_id, m.created_at) for m in messages]


def zst(data: bytes, frames: int = 1) -> bytes:
    """zstd as Codex writes it, a stream without its size; in one frame or several."""
    step = max(1, -(-len(data) // frames))
    out = b""
    for at in range(0, len(data), step):
        obj = zstandard.ZstdCompressor(write_content_size=False).compressobj()
        out += obj.compress(data[at:at + step]) + obj.flush()
    return out


def stream(data: bytes, batch: int | None = None, limit: int | None = None,
           chunk: int | None = None) -> list[Transcript]:
    """parse_stream over the lines of `data`, read `chunk` bytes at a time."""
    source = io.BytesIO(data)

    def read(n: int) -> bytes:
        return source.read(min(n, chunk) if chunk else n)

    return list(parse_stream(core.read_lines(read, limit), batch))


def jsonl(*lines: dict[str, Any]) -> str:
    return "".join(json.dumps(x) + "\n" for x in lines)


def mem_json(script_runner: ScriptRunner, *args: str, stdin: str = "") -> Any:
    result = mem(script_runner, *args, "--json", stdin=stdin)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def piped(script_runner: ScriptRunner, data: bytes, *args: str) -> Any:
    """`mem ingest - ARGS --json` with bytes (zstd, say) on stdin."""
    result = script_runner.run(["mem", "ingest", "-", *args, "--json"],
                               stdin=io.TextIOWrapper(io.BytesIO(data)))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def stored(script_runner: ScriptRunner, session: str, user: str = "alice") -> list[Any]:
    doc = mem_json(script_runner, "list", "--session", session, "--type", "message",
                   "--limit", "100000", "--user", user)
    return list(doc["records"])


# --- item_completed: paginated threads ------------------------------------------------------

def test_paginated_rollout_pairs_item_completed_with_response_items() -> None:
    t = parse(fixture("codex-paginated.jsonl"))
    s = PAGINATED_SID
    assert (t.format, t.session_id) == ("codex", s)
    assert rows(t.messages) == [
        # The question as a response_item (line 7): its item_completed twin (8) is not kept.
        ("user", "Why is the nightly invoice export so slow?", f"{s}:7",
         "2026-03-02T09:00:02.000Z"),
        ("assistant", "[tool exec_command] rg -n 'def export_invoices' jobs/", f"{s}:11",
         "2026-03-02T09:00:04.000Z"),
        # The CommandExecution item (12) repeats the call and gives the output first: its
        # output is kept (the second message of line 12), the function_call_output is not.
        ("tool", "jobs/export.py:41:def export_invoices(session):", f"{s}:12#2",
         "2026-03-02T09:00:04.300Z"),
        # The answer as item_completed first (14): the response_item (15) is its twin,
        # though it breaks the line elsewhere.
        ("assistant", "export_invoices loads every invoice into memory before writing the "
         "CSV; at 2M rows it swaps.", f"{s}:14", "2026-03-02T09:00:06.000Z"),
        # A plan has no response_item: the item is the only record.
        ("assistant", "1. Stream invoices in pages of 10,000\n2. Write the CSV row by row",
         f"{s}:16", "2026-03-02T09:00:06.500Z"),
        ("user", "Do it, and keep the CSV header.", f"{s}:21", "2026-03-02T09:01:01.000Z"),
        ("assistant", "[tool web_search] python csv DictWriter streaming rows", f"{s}:23",
         "2026-03-02T09:01:02.000Z"),
        ("assistant", "[tool apply_patch] *** Begin Patch *** Update File: jobs/export.py @@ "
         "- rows = session.query(Invoice).all() + rows = "
         "session.query(Invoice).yield_per(10_000) *** End Patch", f"{s}:25",
         "2026-03-02T09:01:03.000Z"),
        ("tool", "Success. Updated the following files: M jobs/export.py", f"{s}:26#2",
         "2026-03-02T09:01:03.200Z"),
        # An MCP call recorded only as item_completed: its call and its result.
        ("assistant", "[tool tracker__search_issues] invoice export timeout", f"{s}:28",
         "2026-03-02T09:01:04.000Z"),
        ("tool", "#412 Nightly invoice export times out (open)", f"{s}:28#2",
         "2026-03-02T09:01:04.000Z"),
        ("assistant", "Done: the export streams 10,000 invoices at a time and writes the "
         "header once. This also fixes #412.", f"{s}:29", "2026-03-02T09:01:05.000Z"),
        # The same words in a later turn are a new message (paired with their own twin).
        ("user", "Do it, and keep the CSV header.", f"{s}:33", "2026-03-02T09:02:00.500Z"),
        ("assistant", "It is already done: see jobs/export.py.", f"{s}:35",
         "2026-03-02T09:02:01.000Z"),
    ]
    assert t.ignored == {"duplicate item": 9, "thinking": 2, "event": 6, "settings": 2,
                         "system prompt": 1, "harness text": 1,
                         "unknown type": 1}  # world_state
    assert len({m.message_id for m in t.messages}) == len(t.messages)


def _line(kind: str, payload: dict[str, Any], second: int = 0) -> dict[str, Any]:
    return {"timestamp": f"2026-03-02T10:00:{second:02d}.000Z", "type": kind,
            "payload": payload}


def _said(role: str, text: str) -> dict[str, Any]:
    kind = "input_text" if role == "user" else "output_text"
    return _line("response_item", {"type": "message", "role": role,
                                   "content": [{"type": kind, "text": text}]})


def _done(item: dict[str, Any]) -> dict[str, Any]:
    return _line("event_msg", {"type": "item_completed", "thread_id": "t", "turn_id": "u",
                               "item": item, "completed_at_ms": 0})


def _user_item(text: str) -> dict[str, Any]:
    return _done({"type": "UserMessage", "id": f"id-{text}",
                  "content": [{"type": "text", "text": text, "text_elements": []}]})


def _agent_item(text: str) -> dict[str, Any]:
    return _done({"type": "AgentMessage", "id": f"id-{text}",
                  "content": [{"type": "Text", "text": text}]})


META = _line("session_meta", {"id": "p-1", "timestamp": "2026-03-02T10:00:00Z"})


def test_twins_pair_one_to_one_in_either_order() -> None:
    t = parse(jsonl(
        META,
        _said("user", "hi"), _user_item("hi"),  # response first
        _agent_item("hello"), _said("assistant", "hello"),  # event first
        _said("user", "hi"), _said("user", "hi"),  # said twice: both kept...
        _user_item("hi"), _user_item("hi"),  # ...and both their twins paired
        _user_item("only as an item"),  # no twin ever comes: kept
        _done({"type": "CommandExecution", "id": "c1", "command": "make",
               "aggregated_output": "boom", "exit_code": 2, "status": "failed"}),
        _line("response_item", {"type": "function_call", "name": "shell", "call_id": "c1",
                                "arguments": json.dumps({"command": ["make"]})}),
        _line("response_item", {"type": "function_call_output", "call_id": "c1",
                                "output": "boom"}),
        _done({"type": "Reasoning", "id": "r", "summary_text": ["x"]}),
        _done({"type": "ContextCompaction", "id": "k"}),
        _done({"type": "ImageView", "id": "i", "path": "/x.png"}),
        _line("event_msg", {"type": "item_completed", "item": "not an item"}),
    ))
    assert [(m.role, m.content, m.message_id) for m in t.messages] == [
        ("user", "hi", "p-1:2"),
        ("assistant", "hello", "p-1:4"),
        ("user", "hi", "p-1:6"),
        ("user", "hi", "p-1:7"),
        ("user", "only as an item", "p-1:10"),
        ("assistant", "[tool shell] make", "p-1:11"),
        ("tool", "[error] boom", "p-1:11#2"),
    ]
    assert t.ignored == {"duplicate item": 6, "thinking": 1, "encrypted summary": 1,
                         "event": 1, "unknown type": 1}


def test_item_completed_context_and_ide_preamble_are_read_like_response_items() -> None:
    t = parse(jsonl(
        META,
        _user_item("<environment_context><cwd>/x</cwd></environment_context>"),
        _user_item("# Context from my IDE setup:\n## Open tabs: a.py\n"
                   "## My request for Codex:\nrename foo"),
        _said("user", "# Context from my IDE setup:\n## Open tabs: a.py\n"
                      "## My request for Codex:\nrename foo"),
    ))
    assert [(m.content, m.message_id) for m in t.messages] == [("rename foo", "p-1:3")]
    assert t.ignored == {"harness text": 1, "duplicate item": 1}


@pytest.mark.parametrize("name", ["codex-paginated.jsonl", "codex-rollout.jsonl"])
def test_a_prefix_of_a_paginated_rollout_gives_the_same_ids(name: str) -> None:
    text = fixture(name)
    whole = {m.message_id: m for m in [*parse(text).messages, *parse(text).summaries]}
    ends = [i + 1 for i, c in enumerate(text) if c == "\n"]
    for cut in sorted({*ends, *(e - 30 for e in ends if e > 30)}):
        try:
            part = parse(text[:cut])
        except DataError:
            continue
        for m in [*part.messages, *part.summaries]:
            assert m.message_id in whole, (cut, m)
            assert rows([m]) == rows([whole[m.message_id]]), cut


# --- the stream reader ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["codex-paginated.jsonl", "codex-rollout.jsonl",
                                  "codex-legacy.jsonl"])
def test_a_stream_in_batches_gives_what_parse_gives(name: str) -> None:
    text = fixture(name)
    whole = parse(text)
    for batch, chunk in ((2, 7), (3, None), (10_000, 1)):
        batches = stream(text.encode(), batch=batch, chunk=chunk)
        assert all(len(b.messages) <= batch for b in batches)
        assert {b.session_id for b in batches} == {whole.session_id}
        assert rows([m for b in batches for m in b.messages]) == rows(whole.messages)
        assert rows(batches[-1].summaries) == rows(whole.summaries)
        assert batches[-1].ignored == whole.ignored
        assert all(not b.summaries and not b.ignored for b in batches[:-1])


def test_read_lines_keeps_lines_whole_across_chunks_and_skips_long_ones() -> None:
    data = b"ab\n\ncdef\r\n" + b"x" * 50 + b"\n" + b"tail"
    for chunk in (1, 3, 7, 1 << 20):
        source = io.BytesIO(data)
        lines = list(core.read_lines(lambda n, s=source, c=chunk: s.read(min(n, c)), 20))
        assert lines == [b"ab\n", b"\n", b"cdef\r\n", LongLine(51), b"tail"], chunk
    assert list(core.read_lines(io.BytesIO(b"x" * 30).read, 20)) == [LongLine(30)]
    assert list(core.read_lines(io.BytesIO(b"").read)) == []


def test_long_and_undecodable_lines_are_counted_and_numbered() -> None:
    out = "y" * 300
    lines = [META,
             _said("user", "first"),
             _line("response_item", {"type": "function_call_output", "call_id": "a",
                                     "output": out}),
             _said("assistant", "after the long line")]
    text = jsonl(*lines)
    data = text.encode() + b'{"not": "utf-8 \xff"}\n' + _said_bytes("user", "last") + \
        b'{"timestamp": "2026-03-02T10:0' + "é".encode()[:1]  # torn in a character
    batches = stream(data, limit=200)
    got = [m for b in batches for m in b.messages]
    # The long line is not read, but counted: the lines after it keep their numbers (ids).
    assert [(m.content, m.message_id) for m in got] == [
        ("first", "p-1:2"), ("after the long line", "p-1:4"), ("last", "p-1:6")]
    assert batches[-1].ignored == {"line too long": 1, "not utf-8": 1, "torn last line": 1}


def _said_bytes(role: str, text: str) -> bytes:
    return (json.dumps(_said(role, text)) + "\n").encode()


def test_a_stream_with_nothing_to_keep_is_no_error_like_a_whole_file() -> None:
    """A rollout opened and quit (its session line, the model's thinking): nothing to
    keep. Lines of another format read as a rollout are refused, as a whole file is."""
    (empty,) = stream(b"\n \n")
    assert (empty.messages, empty.summaries, empty.ignored) == ([], [], {})
    (quiet,) = stream(jsonl(META, _done({"type": "Reasoning", "id": "r"})).encode())
    assert (quiet.session_id, quiet.messages, quiet.ignored) == ("p-1", [], {"thinking": 1})
    claude = {"type": "user", "uuid": "u1", "parentUuid": None,
              "message": {"role": "user", "content": "hello"}}
    with pytest.raises(DataError, match=r"no codex messages .*1 unknown type"):
        stream(jsonl(claude).encode())


@pytest.mark.parametrize(("name", "fmt"), [
    ("codex-paginated.jsonl", "codex"), ("codex-rollout.jsonl", "codex"),
    ("codex-legacy.jsonl", "codex"), ("claude-code.jsonl", None),
    ("gemini-session.jsonl", None), ("gemini-legacy.json", None),
    ("gemini-checkpoint.json", None), ("jsonl-good.jsonl", None)])
def test_detect_stream_agrees_with_detect(name: str, fmt: str | None) -> None:
    text = fixture(name)
    assert detect_stream(iter(text.splitlines(keepends=True))) == fmt
    assert (detect(text) == "codex") == (fmt == "codex")


def test_detect_stream_leaves_a_document_over_several_lines_to_detect() -> None:
    # Lines of Codex's shape inside one JSON document: read whole, never as a stream.
    doc = "[\n" + json.dumps(_said("user", "x")) + ",\n" + json.dumps(_said("user", "y")) + "\n]"
    assert detect_stream(iter(doc.splitlines(keepends=True))) is None
    assert detect_stream(iter(["\ufeff\n", "not json\n", json.dumps(META)])) == "codex"
    assert detect_stream(iter([])) is None


# --- zstd -----------------------------------------------------------------------------------

@pytest.mark.parametrize("frames", [1, 3])
def test_a_zst_rollout_ingests_like_the_plain_file(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, frames: int) -> None:
    plain = FIXTURES / "codex-paginated.jsonl"
    expected = len(parse(plain.read_text()).messages)
    packed = tmp_path / "rollout-2026-03-02T09-00-00-019a4c2e.jsonl.zst"
    packed.write_bytes(zst(plain.read_bytes(), frames))
    first = mem_json(script_runner, "ingest", str(packed))
    assert (first["session_id"], first["format"]) == (PAGINATED_SID, "codex")
    assert (first["messages_added"], first["messages_skipped"]) == (expected, 0)
    assert first["ignored"]["duplicate item"] == 9
    # The same rollout, plain, or compressed on stdin: the same messages, stored once.
    again = mem_json(script_runner, "ingest", str(plain))
    assert (again["messages_added"], again["messages_skipped"]) == (0, expected)
    piped_in = piped(script_runner, packed.read_bytes())
    assert (piped_in["session_id"], piped_in["messages_added"]) == (PAGINATED_SID, 0)
    records = stored(script_runner, PAGINATED_SID)
    assert len(records) == expected == len({r["message_id"] for r in records})


@pytest.mark.parametrize(("name", "session"), [
    ("claude-code.jsonl", "5f0c2a8e-3b1d-4c6f-9a7e-2d8b1c4e6f00"),
    ("gemini-session.jsonl", "9c1e7a52-4d1b-4f0e-8a61-3b2f0c9d7e15"),
    ("gemini-legacy.json", "477739d0-1b78-4aa7-9116-02d08c952344"),
    ("jsonl-good.jsonl", "jsonl-good"),  # named after the file, without .zst
])
def test_a_zst_of_any_format_is_read_like_the_plain_file(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, name: str,
        session: str) -> None:
    packed = tmp_path / f"{name}.zst"
    packed.write_bytes(zst((FIXTURES / name).read_bytes()))
    doc = mem_json(script_runner, "ingest", str(packed))
    expected = len(parse(fixture(name)).messages)
    assert (doc["session_id"], doc["messages_added"]) == (session, expected)


def test_a_damaged_zst_fails_in_one_line(script_runner: ScriptRunner, vault: Vault,
                                         tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transcripts, "STREAM_BATCH", 2)  # stored as it is read
    source = (FIXTURES / "codex-paginated.jsonl").read_bytes()
    packed = zst(source, frames=2)
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(packed[:-5])  # the second frame is cut short
    result = mem(script_runner, "ingest", str(cut))
    assert result.returncode == 65
    assert "cut short" in one_error_line(result.stderr)
    # What could be read was stored; the whole file later adds only the rest, once.
    first = len(stored(script_runner, PAGINATED_SID))
    expected = len(parse(source.decode()).messages)
    assert 0 < first < expected
    cut.write_bytes(packed)
    doc = mem_json(script_runner, "ingest", str(cut))
    assert (doc["messages_added"], doc["messages_skipped"]) == (expected - first, first)

    fake = tmp_path / "fake.jsonl.zst"
    fake.write_bytes(source)
    result = mem(script_runner, "ingest", str(fake))
    assert result.returncode == 65
    assert "is not zstd-compressed" in one_error_line(result.stderr)


# --- --scan: sessions/ and archived_sessions/ -------------------------------------------------

def test_scan_reads_sessions_and_archived_sessions(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    codex = tmp_path / ".codex"
    live = codex / "sessions" / "2026" / "03" / "02" / "rollout-2026-03-02T09-00-00-p.jsonl"
    archived = codex / "archived_sessions" / "rollout-2025-10-29T00-59-38-r.jsonl.zst"
    old = codex / "sessions" / "2025" / "04" / "18" / "rollout-2025-04-18T14-02-11-l.jsonl"
    for path in (live, archived, old):
        path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "codex-paginated.jsonl", live)
    archived.write_bytes(zst((FIXTURES / "codex-rollout.jsonl").read_bytes()))
    old.write_bytes((FIXTURES / "codex-legacy.jsonl").read_bytes())
    # Codex compressing a rollout: for a moment both files are there. The plain one is read.
    old.with_name(old.name + ".zst").write_bytes(zst(old.read_bytes()))
    (codex / "history.jsonl.gz").write_bytes(b"not scanned")
    expected = sum(len(parse(fixture(n)).messages) for n in
                   ("codex-paginated.jsonl", "codex-rollout.jsonl", "codex-legacy.jsonl"))

    first = mem_json(script_runner, "ingest", "--scan", str(codex))
    assert (first["files_scanned"], first["files_ingested"]) == (3, 3)
    assert (first["messages_added"], first["errors"]) == (expected, [])
    assert len(stored(script_runner, ROLLOUT_SID)) == len(parse(
        fixture("codex-rollout.jsonl")).messages)
    again = mem_json(script_runner, "ingest", "--scan", str(codex))
    assert (again["files_ingested"], again["messages_added"]) == (0, 0)

    # Codex recompresses the idle rollout and removes the plain file: a new file to the
    # scan, the same messages to the vault.
    live.with_name(live.name + ".zst").write_bytes(zst(live.read_bytes()))
    live.unlink()
    old.unlink()
    third = mem_json(script_runner, "ingest", "--scan", str(codex))
    assert (third["files_scanned"], third["files_ingested"]) == (3, 2)
    assert (third["messages_added"], third["errors"]) == (0, [])


# --- streaming: long lines, batches, --strict, a run stopped half-way ------------------------

def test_a_line_too_long_to_read_is_counted_not_stored(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    with path.open("w") as fh:
        fh.write(jsonl(META, _said("user", "before")))
        fh.write(json.dumps(_line("response_item", {
            "type": "function_call_output", "call_id": "a",
            "output": "z" * (MAX_LINE + 1)})) + "\n")
        fh.write(jsonl(_said("assistant", "after")))
    doc = mem_json(script_runner, "ingest", str(path))
    assert (doc["messages_added"], doc["ignored"]) == (2, {"line too long": 1})
    assert {r["message_id"] for r in stored(script_runner, "p-1")} == {"p-1:2", "p-1:4"}


def _conversation(n: int, secret_at: int | None = None) -> str:
    said = [_said("user" if i % 2 == 0 else "assistant",
                  f"note {i}: " + ("Deploy with " + _fake_aws() if i == secret_at else
                                   f"invoice batch {i * 7919 % 10007}"))
            for i in range(n)]
    return jsonl(META, *said)


def _fake_aws() -> str:
    rng = random.Random(3)
    return "AKIA" + "".join(rng.choice(string.ascii_uppercase + "234567") for _ in range(16))


def test_a_run_stopped_between_batches_stores_each_message_once(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transcripts, "STREAM_BATCH", 40)
    path = tmp_path / "rollout.jsonl"
    path.write_text(_conversation(130))
    real: Callable[..., core.Added] = core.add_messages
    calls: list[int] = []

    def crashing(*args: Any, **kwargs: Any) -> core.Added:
        calls.append(len(args[2]))
        if len(calls) == 3:
            raise KeyboardInterrupt  # killed while the third batch is on its way
        return real(*args, **kwargs)

    monkeypatch.setattr(core, "add_messages", crashing)
    with pytest.raises(KeyboardInterrupt):
        core.ingest_file(vault, path)
    assert calls == [40, 40, 40]
    monkeypatch.setattr(core, "add_messages", real)
    assert len(stored(script_runner, "p-1")) == 80
    doc = mem_json(script_runner, "ingest", str(path))
    assert (doc["messages_added"], doc["messages_skipped"]) == (50, 80)
    records = stored(script_runner, "p-1")
    assert len(records) == 130 == len({r["message_id"] for r in records})


def nothing_stored(script_runner: ScriptRunner) -> bool:
    """No write reached the vault: the user was not even created."""
    listed = mem(script_runner, "list", "--type", "message")
    return listed.returncode == 66 and "has no memory yet" in listed.stderr


def test_strict_refuses_a_stream_before_its_first_batch_is_stored(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transcripts, "STREAM_BATCH", 10)
    path = tmp_path / "rollout.jsonl"
    path.write_text(_conversation(60, secret_at=55))  # in the last batch
    result = mem(script_runner, "ingest", str(path), "--strict")
    assert result.returncode == 77
    assert "--strict" in one_error_line(result.stderr)
    piped_in = mem(script_runner, "ingest", "-", "--strict", stdin=path.read_text())
    assert piped_in.returncode == 77
    assert nothing_stored(script_runner)
    # Without --strict the message with the secret is withheld, the rest stored.
    doc = mem_json(script_runner, "ingest", "-", stdin=path.read_text())
    assert (doc["messages_added"], doc["withheld"]) == (59, 1)


def test_dry_run_of_a_stream_previews_every_batch(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transcripts, "STREAM_BATCH", 4)
    path = tmp_path / "rollout.jsonl"
    path.write_text(_conversation(10))
    doc = mem_json(script_runner, "ingest", str(path), "--dry-run")
    assert [m["message_id"] for m in doc["messages"]] == [f"p-1:{n}" for n in range(2, 12)]
    assert nothing_stored(script_runner)


# --- a gigabyte ---------------------------------------------------------------------------------

def make_rollout(path: Path, size: int, messages: int, output: int = 2 * MiB,
                 too_long: int = 2) -> int:
    """A Codex rollout of about `size` bytes: `messages` short messages among tool outputs
    of `output` bytes (what makes rollouts big), and `too_long` outputs longer than
    MAX_LINE. Returns how many messages it holds."""
    stamp = "2026-03-02T10:00:00.000Z"

    def output_line(call: str, size: int) -> bytes:
        return json.dumps(_line("response_item", {
            "type": "function_call_output", "call_id": call,
            "output": "Exit code: 0\nOutput:\n" + ("row,1234,paid\n" * (size // 14))}),
        ).encode() + b"\n"

    head, tail = output_line("CALL", output).split(b"CALL")
    outputs = max(1, (size - too_long * (MAX_LINE + MiB)) // (len(head) + len(tail)))
    with path.open("wb") as fh:
        fh.write(json.dumps(_line("session_meta", {"id": BIG_SID, "timestamp": stamp}))
                 .encode() + b"\n")
        said = 0
        for i in range(outputs):
            fh.write(head + f"call_{i}".encode() + tail)
            if i < too_long:
                fh.write(output_line(f"long_{i}", MAX_LINE + MiB))
            while said < messages * (i + 1) // outputs:
                fh.write(_said_bytes("user" if said % 2 == 0 else "assistant",
                                     f"message {said} about invoice {said * 7919 % 10007}"))
                said += 1
    return outputs + messages


# Spawns `mem` and writes its rusage's peak RSS to a file. `mem` is not started from pytest
# itself: a child's peak RSS counts the memory of the process it was forked from (Linux
# keeps the larger of the two at exec), and pytest's is larger than mem's.
LAUNCHER = """
import os, sys
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as fh:
    fh.write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_mem(*args: str) -> tuple[subprocess.CompletedProcess[str], int, float]:
    """The installed `mem` in a real process: its result, its peak RSS (bytes), seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        rss = Path(tmp) / "rss"
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", LAUNCHER, str(rss),
                               shutil.which("mem") or "mem", *args],
                              capture_output=True, text=True, check=False)
        return done, int(rss.read_text()), time.perf_counter() - started


@pytest.mark.slow
@pytest.mark.scale
def test_a_gigabyte_rollout_is_read_as_a_stream_in_flat_memory(
        vault: Vault, vault_dir: Path, tmp_path: Path) -> None:
    big, small = tmp_path / "big.jsonl", tmp_path / "small.jsonl"
    try:
        _gigabyte(big, small, vault_dir)
    finally:  # pytest keeps the last runs' tmp_path: not 1.3 GB of them each
        big.unlink(missing_ok=True)
        small.unlink(missing_ok=True)


def _gigabyte(big: Path, small: Path, vault_dir: Path) -> None:
    n_big = make_rollout(big, 1 << 30, messages=6000)
    n_small = make_rollout(small, 256 * MiB, messages=6000)
    assert big.stat().st_size > 1000 * MiB

    result, small_rss, _ = run_mem("ingest", str(small), "--json", "--user", "small")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["messages_added"] == n_small
    result, big_rss, seconds = run_mem("ingest", str(big), "--json", "--user", "big")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["messages_added"], doc["ignored"]) == (n_big, {"line too long": 2})
    # Memory holds a line and a batch, not the file: a 4× larger file, the same peak.
    assert big_rss < 200 * MiB, big_rss / MiB
    assert big_rss < small_rss * 1.2 + 10 * MiB, (big_rss / MiB, small_rss / MiB)
    assert seconds < 120, seconds  # about 6 s alone: only a runaway (quadratic) fails

    # Killed once its first batches are stored: the next run stores the rest, once.
    sessions = vault_dir / "default" / "killed" / "sessions"
    proc = subprocess.Popen([shutil.which("mem") or "mem", "ingest", str(big), "--user",
                             "killed"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    stored_lines = sessions / f"{BIG_SID}.jsonl"
    while not (stored_lines.exists() and stored_lines.stat().st_size) \
            and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the run ended before it could be stopped"
    result, _, _ = run_mem("ingest", str(big), "--json", "--user", "killed")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["messages_skipped"] > 0, doc
    assert doc["messages_added"] + doc["messages_skipped"] == n_big, doc
    listed, _, _ = run_mem("list", "--session", BIG_SID, "--type", "message", "--limit",
                           str(2 * n_big), "--json", "--user", "killed")
    ids = [r["message_id"] for r in json.loads(listed.stdout)["records"]]
    assert len(ids) == n_big == len(set(ids))
