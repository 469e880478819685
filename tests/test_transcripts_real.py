"""The transcript parsers on real sessions (../shared/bench-data/transcripts, see its README).

What each session must yield is worked out here from the raw JSON, independently of the
parser: every non-empty tool result, every prompt the user typed (slash commands as
typed), no line of the agent's harness stored as the user's words, summaries without
their preamble, stable message ids as a file grows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from memvault.errors import DataError, NotTranscript
from memvault.model.records import NewMessage
from memvault.text.transcripts import parse

DATA = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "transcripts"
CLAUDE = DATA / "claude-code"
SESSION = "258c7280-ae70-4798-800f-63464d01a85d"
SUBAGENTS = CLAUDE / SESSION / "subagents"
MAIN = [f"{SESSION}.jsonl", "short.jsonl", "tool_heavy.jsonl", "vibe-claude-code-1.0.95.jsonl"]
CODEX = DATA / "codex" / "rollout-vibe-codex-0.39.jsonl"
GEMINI = DATA / "gemini" / "session-vibe-gemini.jsonl"
ALL = [*(CLAUDE / n for n in MAIN), SUBAGENTS / "agent-a881341.jsonl", CODEX, GEMINI]

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"no benchmark data in {DATA}")

# What Claude Code itself writes into user lines (its harness), by how such a line starts.
HARNESS_STARTS = ("[Request interrupted by user", "<task-notification>",
                  "<local-command-caveat>", "Caveat: The messages below were generated")
HARNESS_WORDS = ("<command-name>", "<command-message>", "<command-args>",
                 "<local-command-stdout>", "<local-command-caveat>", "<system-reminder>",
                 "<task-notification>", "[Request interrupted by user",
                 "This session is being continued", "<environment_context>",
                 "# Context from my IDE setup", "<session_context>")


def raw(path: Path) -> list[dict[str, Any]]:
    """The file's JSON lines (each line of these files is whole), an entry written twice
    kept once."""
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    for line in path.read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            if entry.get("uuid") in seen:
                continue
            seen.add(entry.get("uuid", ""))
            entries.append(entry)
    return entries


def words(text: str) -> str:
    return " ".join(text.split())


def by_id(messages: list[NewMessage]) -> dict[str | None, NewMessage]:
    return {m.message_id: m for m in messages}


# --- Claude Code: what the raw lines say -----------------------------------------------------

def content_of(entry: dict[str, Any]) -> Any:
    message = entry.get("message")
    return message.get("content") if isinstance(message, dict) else None


def texts_of(entry: dict[str, Any]) -> str:
    content = content_of(entry)
    if isinstance(content, str):
        return content.strip()
    return "\n".join(b["text"].strip() for b in content or []
                     if b.get("type") == "text" and b["text"].strip())


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        content = " ".join(b.get("text", "") for b in content if isinstance(b, dict))
    return words(content or "")


def said(text: str) -> list[tuple[str, str]]:
    """What a user (or local command) line says, as this test reads Claude Code's tags."""
    if text.startswith(HARNESS_STARTS):
        return []
    name = re.search(r"<command-name>(.*?)</command-name>", text, re.S)
    if name:
        args = re.search(r"<command-args>(.*?)</command-args>", text, re.S)
        typed = name.group(1).strip()
        return [("user", f"{typed} {args.group(1).strip()}".strip() if args else typed)]
    out = re.fullmatch(r"<local-command-std(?:out|err)>(.*)</local-command-std(?:out|err)>",
                       text, re.S)
    if out:
        shown = words(out.group(1))
        return [("tool", shown)] if shown and shown != "(no content)" else []
    return [("user", text)]


def claude_expected(entries: list[dict[str, Any]]) -> tuple[list[tuple[str, str, str]], int]:
    """The (role, id, words) the user typed, saw, or got back from a tool, in file order,
    and how many of them are tool results. These sessions hold no rewind (see
    test_real_claude_sessions_hold_no_rewind), so every line of the main chain counts."""
    out: list[tuple[str, str, str]] = []
    results = 0
    for e in entries:
        if e.get("isSidechain") or e.get("isMeta"):
            continue
        if e.get("type") == "system" and e.get("subtype") == "local_command":
            out += [(role, e["uuid"], words(x)) for role, x in said(e["content"].strip())]
        if e.get("type") != "user":
            continue
        text = texts_of(e)
        if e.get("isCompactSummary"):
            continue
        units = said(text) if text else []
        content = content_of(e)
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result" and result_text(block):
                units.append(("tool", result_text(block)))
                results += 1
        for k, (role, x) in enumerate(units, 1):
            out.append((role, e["uuid"] if k == 1 else f"{e['uuid']}#{k}", words(x)))
    return out, results


@pytest.mark.parametrize("name", MAIN)
def test_real_claude_sessions_hold_no_rewind(name: str) -> None:
    """Every turn leads to the last one, or is the result of a tool call on the way."""
    entries = raw(CLAUDE / name)
    where = {e["uuid"]: e for e in entries if "uuid" in e}
    turns = [e for e in entries if e.get("type") in ("user", "assistant")]
    chain: set[str] = set()
    node: dict[str, Any] | None = turns[-1]
    while node is not None:
        chain.add(node["uuid"])
        parent = node.get("parentUuid") or node.get("logicalParentUuid")
        node = where.get(parent) if parent else None
    replies = {e["message"]["id"] for e in turns if e["uuid"] in chain
               and e["type"] == "assistant"}
    off = [e for e in turns if e["uuid"] not in chain
           and not any(b.get("type") == "tool_result" for b in content_of(e) or []
                       if isinstance(b, dict))  # a parallel call's result
           and not (e["type"] == "assistant" and e["message"]["id"] in replies)]
    assert off == []
    assert "abandoned branch" not in parse((CLAUDE / name).read_text()).ignored


# Pinned, as counted from the raw files: tool results that say something, prompts typed.
COUNTS = {f"{SESSION}.jsonl": (179, ["Implement spotter-gqc", "did you push?"]),
          "short.jsonl": (2, ["mix phx.server doesnt seem to start", "/model"]),
          "tool_heavy.jsonl": (6, ["start phoenix in background", "/mcp", "/mcp",
                                   "scrolling back in xterm.js still does not work (maybe "
                                   "because outer web catches it)? websearch xterm.js tmux "
                                   "interactions"]),
          "vibe-claude-code-1.0.95.jsonl": (30, None)}


@pytest.mark.parametrize("name", MAIN)
def test_real_claude_sessions_keep_every_result_and_prompt(name: str) -> None:
    entries = raw(CLAUDE / name)
    expected, results = claude_expected(entries)
    t = parse((CLAUDE / name).read_text())
    got = [(m.role, m.message_id, words(m.content)) for m in t.messages if m.role != "assistant"]
    # Tool output is shortened to a few hundred characters: compare the start.
    assert [(r, i) for r, i, _ in got] == [(r, i) for r, i, _ in expected]
    for (_, _, mine), (_, mid, theirs) in zip(got, expected, strict=True):
        assert theirs.startswith(mine.removeprefix("[error] ").removesuffix("…")), mid

    pinned, prompts = COUNTS[name]
    assert results == pinned
    typed = [x for r, _, x in expected if r == "user"]
    if prompts is not None:
        assert typed == [words(p) for p in prompts]
    for m in t.messages:
        if m.role == "user":
            assert not any(w in m.content for w in HARNESS_WORDS), m


@pytest.mark.parametrize("name", MAIN)
def test_real_claude_sessions_keep_every_tool_call(name: str) -> None:
    entries = raw(CLAUDE / name)
    calls = {b["id"] for e in entries if e.get("type") == "assistant"
             for b in content_of(e) if b.get("type") == "tool_use"}
    answered = {b["tool_use_id"] for e in entries if isinstance(content_of(e), list)
                for b in content_of(e) if b.get("type") == "tool_result"}
    assert calls == answered  # every call has its result in the file
    t = parse((CLAUDE / name).read_text())
    lines = [x for m in t.messages if m.role == "assistant" for x in m.content.split("\n")
             if x.startswith("[tool ")]
    assert len(lines) == len(calls)
    replies = {e["message"]["id"] for e in entries if e.get("type") == "assistant"
               and any(b.get("type") in ("text", "tool_use") and (b.get("text") or "x").strip()
                       for b in content_of(e))}
    assert {m.message_id for m in t.messages if m.role == "assistant"} == replies


def test_real_claude_summary_is_the_body_at_its_own_time() -> None:
    entries = raw(CLAUDE / f"{SESSION}.jsonl")
    [line] = [e for e in entries if e.get("isCompactSummary")]
    text = texts_of(line)
    # Claude Code's opening sentences end the first paragraph; its closing lines start at
    # "If you need specific details".
    body = text[text.index("\n\n") + 2: text.index("\n\nIf you need specific details")]
    t = parse((CLAUDE / f"{SESSION}.jsonl").read_text())
    assert [(s.role, s.message_id, s.created_at) for s in t.summaries] == [
        ("summary", line["uuid"], line["timestamp"])]
    assert t.summaries[0].content == body.strip()
    assert t.summaries[0].content.startswith("Analysis:")
    assert line["uuid"] not in by_id(t.messages)


def test_real_subagent_belongs_to_its_parent_session() -> None:
    path = SUBAGENTS / "agent-a881341.jsonl"
    entries = raw(path)
    parent = raw(CLAUDE / f"{SESSION}.jsonl")
    t = parse(path.read_text())
    assert t.session_id == parent[-1]["sessionId"] == SESSION
    assert {m.channel for m in t.messages} == {f"subagent:{entries[0]['agentId']}"}
    prompt = next(e for e in entries if e["type"] == "user")
    assert t.messages[0].role == "user" and t.messages[0].content == texts_of(prompt)
    results = [b for e in entries if isinstance(content_of(e), list)
               for b in content_of(e) if b.get("type") == "tool_result" and result_text(b)]
    assert len([m for m in t.messages if m.role == "tool"]) == len(results) == 2
    replies = {e["message"]["id"] for e in entries if e["type"] == "assistant"}
    assert [m.message_id for m in t.messages if m.role == "assistant"] == sorted(
        replies, key=[e.get("message", {}).get("id") for e in entries].index)
    # Its ids are its own: nothing it holds is taken for the parent's messages.
    assert not by_id(t.messages).keys() & by_id(parse(
        (CLAUDE / f"{SESSION}.jsonl").read_text()).messages).keys()


def test_real_compaction_agent_is_not_a_transcript() -> None:
    with pytest.raises(NotTranscript, match="compaction agent"):
        parse((SUBAGENTS / "agent-acompact-fffbd0.jsonl").read_text())


# --- Codex and Gemini ------------------------------------------------------------------------

def test_real_codex_session() -> None:
    lines = [json.loads(x) for x in CODEX.read_text().splitlines() if x.strip()]
    # Codex records what the user typed as user_message events (the IDE's context first).
    typed = [p["message"].split("## My request for Codex:")[-1].strip() for x in lines
             if x["type"] == "event_msg" and (p := x["payload"])["type"] == "user_message"]
    outputs = [x["payload"]["output"] for x in lines if x["type"] == "response_item"
               and x["payload"]["type"] in ("function_call_output", "custom_tool_call_output")]
    shown = [json.loads(o)["output"] if o.startswith("{") else o for o in outputs]
    calls = [x for x in lines if x["type"] == "response_item"
             and x["payload"]["type"] in ("function_call", "custom_tool_call")]
    t = parse(CODEX.read_text())
    assert [m.content for m in t.messages if m.role == "user"] == typed and len(typed) == 1
    assert len([m for m in t.messages if m.role == "tool"]) == len(
        [s for s in shown if s.strip()]) == len(calls) == 19
    assert t.ignored == {"harness text": 1,  # the environment_context message
                         "event": sum(x["type"] == "event_msg" for x in lines),
                         "settings": sum(x["type"] == "turn_context" for x in lines),
                         "thinking": sum(x["type"] == "response_item" and x["payload"]["type"]
                                         == "reasoning" for x in lines)}


def test_real_gemini_session() -> None:
    records: dict[str, dict[str, Any]] = {}
    for x in GEMINI.read_text().splitlines():
        record = json.loads(x)
        if "id" in record:
            records[record["id"]] = record  # a record written again is its newer version

    def text(content: Any) -> str:
        if isinstance(content, str):
            return content.strip()
        return "\n".join(p["text"].strip() for p in content or [] if "text" in p).strip()

    typed = [text(r.get("displayContent") or r["content"]) for r in records.values()
             if r["type"] == "user"]
    replies = [r for r in records.values() if r["type"] in ("gemini", "model")]
    results = [c for r in replies for c in r.get("toolCalls", [])
               for p in c.get("result", []) if p["functionResponse"]["response"].get("output")]
    t = parse(GEMINI.read_text())
    assert [m.content for m in t.messages if m.role == "user"] == [x for x in typed if x] == [
        "/init", "幫我做一個小修改 請幫我將上面確保執行時要透過 uv run 來執行 避免環境有問題"]
    assert [m.message_id for m in t.messages if m.role == "assistant"] == [
        r["id"] for r in replies if text(r["content"]) or r.get("toolCalls")]
    assert len([m for m in t.messages if m.role == "tool"]) == len(results) == 12
    assert t.ignored == {"notice": sum(r["type"] == "info" for r in records.values()),
                         "empty": len(typed) - len([x for x in typed if x])}


# --- all of them -----------------------------------------------------------------------------

@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_real_files_account_for_every_line(path: Path) -> None:
    t = parse(path.read_text())  # its speed is measured in bench/, not here
    assert t.messages and t.skipped == sum(t.ignored.values())
    assert "not json" not in t.ignored and "torn last line" not in t.ignored
    ids = [m.message_id for m in t.messages]
    assert None not in ids and len(set(ids)) == len(ids)


@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_real_files_keep_their_ids_as_they_grow(path: Path) -> None:
    text = path.read_text()
    whole = parse(text)
    same = by_id([*whole.messages, *whole.summaries])
    ends = [i + 1 for i, c in enumerate(text) if c == "\n"]
    step = max(1, len(ends) // 12)  # a dozen points of the large file, every line of the rest
    cuts = [c for e in ends[::step] for c in (e, e - 20)]
    for cut in cuts:
        try:
            part = parse(text[:cut])
        except DataError:
            continue
        assert part.ignored.get("torn last line", 0) == (not text[:cut].endswith("\n"))
        for m in [*part.messages, *part.summaries]:
            grown = same[m.message_id]  # no rewind: all the prefix said is in the whole
            assert (m.role, m.created_at, m.channel) == (grown.role, grown.created_at,
                                                        grown.channel)
            assert grown.content.startswith(m.content)
