"""Transcript parsers: each agent's file format, the generic jsonl, detection, robustness."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memvault.errors import DataError, NotTranscript, UsageError
from memvault.text.transcripts import FORMATS, Transcript, detect, parse
from tests.conftest import examples

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
Row = tuple[str, str, str | None, str | None]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def rows(messages: list[Any]) -> list[Row]:
    return [(m.role, m.content, m.message_id, m.created_at) for m in messages]


def jsonl(*lines: object) -> str:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)


# --- detection ---------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "fmt"), [
    ("claude-code.jsonl", "claude-code"),
    ("claude-parallel-tools.jsonl", "claude-code"),
    ("claude-subagent.jsonl", "claude-code"),
    ("claude-harness.jsonl", "claude-code"),
    ("claude-compaction.jsonl", "claude-code"),
    ("claude-unlinked.jsonl", "claude-code"),
    ("claude-torn-tail.jsonl", "claude-code"),
    ("codex-rollout.jsonl", "codex"),
    ("codex-legacy.jsonl", "codex"),
    ("gemini-session.jsonl", "gemini"),
    ("gemini-legacy.json", "gemini"),
    ("gemini-checkpoint.json", "gemini"),
    ("gemini-checkpoint-context.json", "gemini"),
    ("gemini-model-records.jsonl", "gemini"),
    ("jsonl-good.jsonl", "jsonl"),
    ("jsonl-speakers.jsonl", "jsonl"),
    ("jsonl-bad-json.jsonl", "jsonl"),
    ("jsonl-missing-content.jsonl", "jsonl"),
])
def test_detect_each_fixture(name: str, fmt: str) -> None:
    assert detect(fixture(name)) == fmt
    if not name.startswith("jsonl-") or name in ("jsonl-good.jsonl", "jsonl-speakers.jsonl"):
        assert parse(fixture(name)).format == fmt


@pytest.mark.parametrize("text", ["", "   \n\n\t\n", "\ufeff"])
def test_empty_input_has_no_format_and_nothing_to_keep(text: str) -> None:
    with pytest.raises(DataError, match="empty"):
        detect(text)
    for fmt in ("auto", *FORMATS):
        t = parse(text, fmt)
        assert (t.format, t.messages, t.summaries, t.ignored) == (fmt, [], [], {})


@pytest.mark.parametrize("text", [
    "hello world\nthis is a plain text file\n",
    "[1, 2, 3]\n",
    '"just a string"\n',
    "[]",
    "{\n  \"name\": \"a pretty-printed JSON document of no agent's shape\"\n}\n",
])
def test_unknown_formats_are_data_errors(text: str) -> None:
    with pytest.raises(DataError, match="not a transcript"):
        detect(text)
    with pytest.raises(DataError):
        parse(text)


def test_detection_looks_past_garbage_and_a_byte_order_mark() -> None:
    text = "\ufeffnot json\n" + fixture("codex-rollout.jsonl")
    assert detect(text) == "codex"
    assert parse(text).skipped == 10  # the fixture's 9 and the garbage line


def test_unknown_format_name_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown transcript format"):
        parse(fixture("jsonl-good.jsonl"), "chatgpt")


@pytest.mark.parametrize(("name", "fmt"), [
    ("codex-rollout.jsonl", "claude-code"),
    ("claude-code.jsonl", "codex"),
    ("claude-code.jsonl", "gemini"),
    ("gemini-session.jsonl", "claude-code"),
])
def test_a_forced_format_that_does_not_fit_is_a_data_error(name: str, fmt: str) -> None:
    with pytest.raises(DataError, match=f"no {fmt} messages"):
        parse(fixture(name), fmt)


def test_a_forced_jsonl_on_an_agent_file_names_the_first_bad_line() -> None:
    with pytest.raises(DataError, match="line 1: unknown field 'leafUuid'"):
        parse(fixture("claude-code.jsonl"), "jsonl")


# --- Claude Code -------------------------------------------------------------------------

CLAUDE_SESSION = "5f0c2a8e-3b1d-4c6f-9a7e-2d8b1c4e6f00"
CLAUDE_MESSAGES: list[Row] = [
    ("user", "The login test in tests/test_auth.py fails about one run in five. "
     "Can you find out why?", "u-001", "2025-06-01T10:00:00.000Z"),
    # Three lines of one API message (text, tool_use, tool_use), merged.
    ("assistant", "I'll look at the test and at the fixture it uses.\n"
     "[tool Read] /home/alice/proj/tests/test_auth.py\n"
     "[tool Bash] pytest tests/test_auth.py -q --count 20",
     "msg_01XkQ", "2025-06-01T10:00:03.100Z"),
    ("tool", '1→import pytest 2→from app.auth import login, make_token 3→ 4→ '
     '5→def test_login(token): 6→ user = login("alice", token) 7→ assert user.name == '
     '"alice" 8→ 9→ 10→def test_login_rejects_expired(expired_token): 11→ with '
     'pytest.raises(PermissionError): 12→ login("alice", expired_token)',
     "u-002", "2025-06-01T10:00:04.000Z"),
    ("tool", "[error] F....F.............. FAILED tests/test_auth.py::test_login - "
     "AssertionError: token expired 2 failed, 18 passed in 2.31s",
     "u-003", "2025-06-01T10:00:09.000Z"),
    # The thinking block of this line is dropped.
    ("assistant", "The `token` fixture issues tokens that expire after one second, so a slow "
     "run expires them. I'll freeze the clock in the fixture.",
     "msg_02YlR", "2025-06-01T10:00:15.000Z"),
    ("assistant", "[tool Edit] /home/alice/proj/tests/conftest.py",
     "msg_03ZmS", "2025-06-01T10:00:16.000Z"),
    ("tool", "The file /home/alice/proj/tests/conftest.py has been updated.",
     "u-004", "2025-06-01T10:00:17.000Z"),
    ("assistant", "Fixed: the fixture now uses a frozen clock. Shall I run the whole suite?",
     "msg_04AnT", "2025-06-01T10:01:10.000Z"),
    # The rewound branch ("yes, run everything" and its `pytest -q`) is gone.
    ("user", "No wait, first show me the diff.", "u-006", "2025-06-01T10:02:00.000Z"),
    ("assistant", "[tool Bash] git diff tests/conftest.py",
     "msg_06CpV", "2025-06-01T10:02:02.000Z"),
    ("tool", "diff --git a/tests/conftest.py b/tests/conftest.py @@ -10,7 +10,7 @@ "
     "def token(): - issued = datetime.now() + issued = FROZEN_NOW return "
     'make_token("alice", issued)', "u-007", "2025-06-01T10:02:04.000Z"),
    # After the compaction boundary, reached through its logicalParentUuid.
    ("user", "Thanks. Please also add a regression test.", "u-009", "2025-06-01T10:31:00.000Z"),
    ("assistant", "Added `test_login_survives_slow_clock` to tests/test_auth.py.",
     "msg_07DqW", "2025-06-01T10:31:20.250Z"),  # given as +00:00
]


def test_claude_code_fixture() -> None:
    t = parse(fixture("claude-code.jsonl"))
    assert t.format == "claude-code"
    assert t.session_id == CLAUDE_SESSION
    assert rows(t.messages) == CLAUDE_MESSAGES
    # Without Claude Code's preamble, at the summary's own time.
    assert rows(t.summaries) == [(
        "summary",
        "Analysis: the user asked why tests/test_auth.py::test_login is flaky.\nSummary: the "
        "token fixture used datetime.now() with a one-second expiry; it now uses FROZEN_NOW.",
        "u-008", "2025-06-01T10:30:00.500Z")]
    assert t.ignored == {
        "title": 1,  # the `summary` line (a session title)
        "file history": 1, "meta": 1, "abandoned branch": 2, "sidechain": 1,
        "not json": 2,  # a line torn mid-file, and a traceback
        "unknown type": 1, "system": 1,  # the compact boundary
        "synthetic": 1,  # the API error
    }
    assert t.skipped == 11


def claude_line(uuid: str, parent: str | None, kind: str, content: Any,
                **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message["id"] = extra.pop("mid", "msg_" + uuid)
    return {"parentUuid": parent, "isSidechain": False, "sessionId": "s-1", "type": kind,
            "message": message, "uuid": uuid, "timestamp": "2025-06-01T10:00:00Z", **extra}


def test_claude_rewind_keeps_only_the_branch_to_the_last_entry() -> None:
    t = parse(jsonl(
        claude_line("u1", None, "user", "root question"),
        claude_line("a1", "u1", "assistant", [{"type": "text", "text": "answer"}]),
        claude_line("u2", "a1", "user", "first try"),
        claude_line("a2", "u2", "assistant", [{"type": "text", "text": "first reply"}]),
        claude_line("u3", "a1", "user", "edited try"),
        claude_line("a3", "u3", "assistant", [{"type": "text", "text": "second reply"}]),
        # A later entry on the old branch makes it the live one again.
        claude_line("u4", "a2", "user", "back to the first"),
    ))
    assert [m.content for m in t.messages] == [
        "root question", "answer", "first try", "first reply", "back to the first"]
    assert t.skipped == 2


def test_claude_missing_parent_line_is_bridged_not_cutting_the_history() -> None:
    t = parse(jsonl(
        claude_line("u1", None, "user", "first"),
        claude_line("a1", "u1", "assistant", [{"type": "text", "text": "second"}]),
        '{"parentUuid":"a1","type":"user","uuid":"u2","mess',  # torn: a link is missing
        claude_line("a2", "u2", "assistant", [{"type": "text", "text": "third"}]),
    ))
    assert [m.content for m in t.messages] == ["first", "second", "third"]
    assert t.skipped == 1


def test_claude_split_lines_repeating_a_block_are_merged_once() -> None:
    tool = {"type": "tool_use", "id": "toolu_1", "name": "Grep",
            "input": {"pattern": "TODO", "path": "src"}}
    t = parse(jsonl(
        claude_line("u1", None, "user", "find the TODOs"),
        claude_line("a1", "u1", "assistant", [{"type": "text", "text": "Searching."}], mid="m"),
        claude_line("a2", "a1", "assistant", [tool], mid="m"),
        claude_line("a3", "a2", "assistant", [tool], mid="m"),
        claude_line("u2", "a3", "user", [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "src/a.py:3: # TODO"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": ""},
            {"type": "tool_result", "tool_use_id": "toolu_3", "content": "src/b.py:9: # TODO"}]),
    ))
    assert rows(t.messages)[1:] == [
        ("assistant", "Searching.\n[tool Grep] TODO", "m", "2025-06-01T10:00:00Z"),
        # Several results on one line: the line's uuid, then uuid#2 ...
        ("tool", "src/a.py:3: # TODO", "u2", "2025-06-01T10:00:00Z"),
        ("tool", "src/b.py:9: # TODO", "u2#2", "2025-06-01T10:00:00Z"),
    ]
    assert t.skipped == 1  # a3 added nothing


def test_claude_tool_lines_are_short() -> None:
    script = "echo " + "word " * 100
    t = parse(jsonl(
        claude_line("u1", None, "user", "go"),
        claude_line("a1", "u1", "assistant", [
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": script}},
            {"type": "tool_use", "id": "t2", "name": "TodoWrite",
             "input": {"todos": [{"content": "write tests", "status": "pending"}]}},
            {"type": "tool_use", "id": "t3", "name": "ExitPlanMode", "input": {}}]),
        claude_line("u2", "a1", "user", [
            {"type": "tool_result", "tool_use_id": "t1", "content": "x  \n" * 400}]),
    ))
    bash, todo, plain = t.messages[1].content.split("\n")
    assert bash == "[tool Bash] " + ("echo " + "word " * 100)[:199].rstrip() + "…"
    assert len(bash) == len("[tool Bash] ") + 200
    assert todo == '[tool TodoWrite] {"todos": [{"content": "write tests", "status": "pending"}]}'
    assert plain == "[tool ExitPlanMode]"
    assert t.messages[2].content == ("x " * 250)[:499] + "…"


def test_claude_old_compaction_summary_without_the_flag() -> None:
    t = parse(jsonl(
        claude_line("u1", None, "user", "This session is being continued from a previous "
                    "conversation that ran out of context. Summary: things happened."),
        claude_line("u2", "u1", "user", "carry on"),
    ))
    assert [m.content for m in t.messages] == ["carry on"]
    assert rows(t.summaries) == [("summary", "Summary: things happened.", "u1",
                                  "2025-06-01T10:00:00Z")]


def test_claude_synthetic_and_meta_entries_are_not_messages() -> None:
    t = parse(jsonl(
        claude_line("u1", None, "user", "hi"),
        claude_line("u2", "u1", "user", "<command-name>/model</command-name>", isMeta=True),
        {**claude_line("a1", "u2", "assistant", []),
         "message": {"id": "x", "role": "assistant", "model": "<synthetic>",
                     "content": [{"type": "text", "text": "No response requested."}]}},
    ))
    assert [m.content for m in t.messages] == ["hi"]
    assert t.ignored == {"meta": 1, "synthetic": 1}


def test_a_claude_session_with_nothing_to_keep_is_no_error_and_says_why() -> None:
    """Harness text and hook context only (a session opened and quit): nothing to keep,
    each line counted by its reason."""
    lines = [claude_line("u1", None, "user", "<system-reminder>x</system-reminder>"),
             claude_line("u2", "u1", "user", "[Request interrupted by user]"),
             claude_line("u3", "u2", "user", "hi", isMeta=True)]
    t = parse(jsonl(*lines))
    assert (t.format, t.messages, t.summaries) == ("claude-code", [], [])
    assert t.ignored == {"harness text": 2, "meta": 1}


@pytest.mark.parametrize("fmt", ["auto", *FORMATS])
def test_an_empty_file_is_nothing_to_keep_in_every_format(fmt: str) -> None:
    for text in ("", "\n \n", "\ufeff"):
        t = parse(text, fmt)
        assert (t.messages, t.summaries, t.ignored) == ([], [], {})


def test_a_file_of_another_format_is_still_refused_saying_what_was_read() -> None:
    codex = jsonl({"timestamp": "2026-03-02T10:00:00Z", "type": "session_meta",
                   "payload": {"id": "p-1"}})
    with pytest.raises(DataError, match=r"^no claude-code messages in the transcript \(1 "
                       r"lines or entries skipped: 1 unknown type\)$"):
        parse(codex, "claude-code")
    claude = jsonl(claude_line("u1", None, "user", "hello"))
    for fmt in ("gemini", "codex"):
        with pytest.raises(DataError, match=f"^no {fmt} messages in the transcript"):
            parse(claude, fmt)


def test_claude_lone_surrogates_are_replaced() -> None:
    line = json.dumps(claude_line("u1", None, "user", "x")).replace('"x"', '"bad \\ud800 text"')
    t = parse(line + "\n")
    assert t.messages[0].content == "bad \ufffd text"
    t.messages[0].content.encode("utf-8")


# Each parallel tool call's result chains to its own tool_use line, off the path from the
# last turn; the abandoned branch (u-02, a-06, r-04) stays out.
def test_claude_parallel_tool_results_are_all_kept() -> None:
    t = parse(fixture("claude-parallel-tools.jsonl"))
    stamp = "2026-02-11T10:0{}Z".format
    assert rows(t.messages) == [
        ("user", "Check both config files and the test log.", "u-01", stamp("0:00.000")),
        ("assistant", "Reading all three.\n[tool Read] /p/a.toml\n[tool Read] /p/b.toml\n"
         "[tool Bash] tail -1 test.log", "msg_A", stamp("0:02.000")),
        ("tool", "alpha = 1", "r-01", stamp("0:03.000")),
        ("tool", "beta = 2", "r-02", stamp("0:03.100")),
        ("tool", "3 passed in 0.02s", "r-03", stamp("0:03.200")),
        ("assistant", "alpha is 1, beta is 2 and the tests pass.", "msg_B", stamp("0:05.000")),
        ("user", "Actually keep it, and rename it to c.toml.", "u-03", stamp("2:00.000")),
        # a-08 is off the parent chain too (r-05 answers a-07): its message id brings it in.
        ("assistant", "[tool Bash] git mv b.toml c.toml\n[tool Bash] git status --short",
         "msg_D", stamp("2:02.000")),
        ("tool", "R b.toml -> c.toml", "r-06", stamp("2:03.000")),  # file order
        ("tool", "exit code 0", "r-05", stamp("2:03.100")),
        ("assistant", "Renamed b.toml to c.toml.", "msg_E", stamp("2:05.000")),
    ]
    assert t.ignored == {"progress": 1, "abandoned branch": 3}


def test_claude_a_result_answered_on_the_branch_is_not_taken_twice() -> None:
    use = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
    result = [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]
    t = parse(jsonl(
        claude_line("u1", None, "user", "list"),
        claude_line("a1", "u1", "assistant", [use], mid="m1"),
        claude_line("r0", "a1", "user", result),  # an earlier copy, off the branch
        claude_line("r1", "a1", "user", result),
        claude_line("a2", "r1", "assistant", [{"type": "text", "text": "One file."}]),
    ))
    assert [(m.role, m.message_id) for m in t.messages] == [
        ("user", "u1"), ("assistant", "m1"), ("tool", "r1"), ("assistant", "msg_a2")]
    assert t.ignored == {"abandoned branch": 1}


def test_claude_a_torn_last_line_is_counted_apart_and_read_once_whole() -> None:
    text = fixture("claude-torn-tail.jsonl")
    assert not text.endswith("\n")
    t = parse(text)
    assert [m.message_id for m in t.messages] == ["u-01", "msg_A", "r-01", "msg_B"]
    assert t.ignored == {"torn last line": 1}
    # The same garbage once a newline follows it is not torn: it is garbage.
    assert parse(text + "\n").ignored == {"not json": 1}
    # The writer finishes the line: the same messages keep their ids, one is added.
    torn = text.rsplit("\n", 1)[1]
    whole = text[: -len(torn)] + jsonl(claude_line("u-02", "a-03", "user", "And lint?"))
    grown = parse(whole)
    assert rows(grown.messages)[:4] == rows(t.messages)
    assert rows(grown.messages)[4][:3] == ("user", "And lint?", "u-02")
    assert grown.ignored == {}


@pytest.mark.parametrize("name", ["claude-parallel-tools.jsonl", "claude-harness.jsonl",
                                  "claude-compaction.jsonl", "claude-code.jsonl",
                                  "codex-rollout.jsonl", "gemini-session.jsonl"])
def test_a_prefix_gives_the_same_messages_the_same_ids(name: str) -> None:
    text = fixture(name)
    whole = {m.message_id: m for m in [*parse(text).messages, *parse(text).summaries]}
    ends = [i + 1 for i, c in enumerate(text) if c == "\n"]
    cuts = sorted({*ends, *(e - 40 for e in ends if e > 40)})  # whole lines, and torn ones
    for cut in cuts:
        try:
            part = parse(text[:cut])
        except DataError:
            continue  # nothing to store yet
        for m in [*part.messages, *part.summaries]:
            assert m.message_id is not None
            same = whole.get(m.message_id)
            if same is None:  # only what the whole file shows was abandoned
                continue
            # The same message: it may only have grown (more lines of one API message).
            assert (m.role, m.created_at) == (same.role, same.created_at), (cut, m)
            assert same.content.startswith(m.content), (cut, m)
        torn = not text[:cut].endswith("\n")
        assert part.ignored.get("torn last line", 0) == torn, cut


def test_claude_subagent_file_belongs_to_the_parent_session() -> None:
    t = parse(fixture("claude-subagent.jsonl"))
    assert t.session_id == "0d6e4b1a-7c2f-4e58-9b3d-1a2b3c4d5e6f"  # the parent's sessionId
    assert [(m.role, m.content, m.message_id, m.channel) for m in t.messages] == [
        ("user", "Find where the retry limit is set.", "s-01", "subagent:a4f1c2e"),
        ("assistant", "[tool Grep] retry_limit", "msg_S1", "subagent:a4f1c2e"),
        ("tool", "src/net.py:12: retry_limit = 5", "s-03", "subagent:a4f1c2e"),
        ("assistant", "It is 5, set in src/net.py line 12.", "msg_S2", "subagent:a4f1c2e"),
    ]
    assert t.ignored == {}


def test_claude_sidechain_turns_in_a_main_file_are_not_the_main_conversation() -> None:
    t = parse(jsonl(
        claude_line("u1", None, "user", "hi"),
        claude_line("s1", None, "user", "search for X", isSidechain=True, agentId="a1"),
        claude_line("a1", "u1", "assistant", [{"type": "text", "text": "hello"}]),
    ))
    assert [(m.content, m.channel) for m in t.messages] == [("hi", None), ("hello", None)]
    assert t.ignored == {"sidechain": 1}


@pytest.mark.parametrize("agent", ["acompact-9f8e7d", "a77e0b1"])
def test_claude_compaction_agent_is_not_a_transcript(agent: str) -> None:
    # Recognised by its agent id, and by its task when the id does not say.
    text = fixture("claude-compaction-agent.jsonl").replace("acompact-9f8e7d", agent)
    for fmt in ("auto", "claude-code"):
        with pytest.raises(NotTranscript, match="compaction agent"):
            parse(text, fmt)


def test_claude_harness_text_is_not_the_users_words() -> None:
    t = parse(fixture("claude-harness.jsonl"))
    assert [(m.role, m.content, m.message_id) for m in t.messages] == [
        ("user", "/review src/net.py --strict", "h-01"),  # the slash command typed
        ("tool", "\x1b[1mReviewing\x1b[22m src/net.py", "h-02"),  # what it printed
        ("assistant", "[tool Read] /p/src/net.py", "msg_H1"),
        ("tool", "retry_limit = 5", "h-05"),
        ("user", "Make the retry limit configurable.", "h-08"),  # its system-reminder gone
        ("assistant", "Done: RETRY_LIMIT is read from the environment.", "msg_H2"),
        ("user", "/model opus", "h-11"),  # Claude Code 2.x: system local_command lines
        ("tool", "Unknown model: opus", "h-12"),
        ("user", "!git status --short", "h-13"),  # bash mode
        ("tool", "M src/net.py", "h-14"),
        ("user", "/exit", "h-15"),
    ]
    # the interrupt, the task notification, an unflagged caveat, "(no content)"
    assert t.ignored == {"meta": 1, "thinking": 1, "harness text": 4}


@pytest.mark.parametrize(("said", "kept"), [
    ("[Request interrupted by user]", []),
    ("[Request interrupted by user for tool use]", []),
    ("<system-reminder>a</system-reminder>before<system-reminder>b\nc</system-reminder> after",
     [("user", "before after")]),
    ("<command-message>init is analyzing</command-message>", []),
    ("<command-name>init</command-name><command-args></command-args>", [("user", "/init")]),
    ("<local-command-stdout></local-command-stdout>", []),
    ("an unclosed <system-reminder> stays", [("user", "an unclosed <system-reminder> stays")]),
    ("quote [Request interrupted by user] mid-line", [
        ("user", "quote [Request interrupted by user] mid-line")]),
])
def test_claude_harness_rules(said: str, kept: list[tuple[str, str]]) -> None:
    lines = [claude_line("u0", None, "user", "start"), claude_line("u1", "u0", "user", said)]
    t = parse(jsonl(*lines))
    assert [(m.role, m.content) for m in t.messages[1:]] == kept
    assert t.ignored == ({} if kept else {"harness text": 1})


def test_claude_compaction_summary_keeps_only_its_body() -> None:
    t = parse(fixture("claude-compaction.jsonl"))
    assert rows(t.summaries) == [(
        "summary", "Summary:\n1. Primary Request and Intent:\n   The user asked for retries in "
        "the HTTP client.\n\n2. Current Work:\n   Exponential backoff was added to src/http.py.",
        "s-01", "2026-02-11T11:00:00.500Z")]
    assert [m.message_id for m in t.messages] == ["u-01", "msg_A", "u-02", "msg_B"]
    assert t.ignored == {"system": 1}  # the compact boundary


def test_claude_entries_without_links_are_read_in_file_order() -> None:
    t = parse(fixture("claude-unlinked.jsonl"))
    assert [(m.role, m.content, m.message_id) for m in t.messages] == [
        ("user", "Which port does the dev server use?", "x-01"),
        ("assistant", "Port 4000, set in config/dev.exs.", "msg_X1"),
        ("user", "Change it to 4001.", "x-03"),
        ("assistant", "Changed to 4001.", "msg_X2"),
    ]
    assert t.ignored == {}


def test_claude_entries_without_uuids_have_no_ids() -> None:
    t = parse(jsonl({"type": "user", "message": {"role": "user", "content": "a"}},
                    {"type": "assistant", "message": {"role": "assistant", "content": "b"}}))
    assert [(m.role, m.content, m.message_id) for m in t.messages] == [
        ("user", "a", None), ("assistant", "b", None)]


# --- Codex CLI ---------------------------------------------------------------------------

CODEX_SESSION = "0199a213-81c0-7800-8aa1-bbab2a035a53"


def test_codex_rollout_fixture() -> None:
    t = parse(fixture("codex-rollout.jsonl"))
    s = CODEX_SESSION
    assert (t.format, t.session_id) == ("codex", s)
    assert rows(t.messages) == [
        # The AGENTS.md, environment_context and developer messages are Codex's own.
        ("user", "Why does `make test` fail on a clean checkout?", f"{s}:5",
         "2025-10-29T00:59:41.002Z"),
        ("assistant", "[tool shell] make test", f"{s}:10", "2025-10-29T00:59:43.900Z"),
        ("tool", "[error] pytest --cov=app tests ERROR: usage: pytest [options] "
         "[file_or_dir] pytest: error: unrecognized arguments: --cov=app",
         f"{s}:11", "2025-10-29T00:59:46.120Z"),
        ("assistant", "[tool apply_patch] *** Begin Patch *** Update File: "
         "requirements-dev.txt @@ pytest>=8 +pytest-cov>=5 *** End Patch",
         f"{s}:12", "2025-10-29T00:59:50.004Z"),
        ("tool", "Success. Updated the following files: M requirements-dev.txt",
         f"{s}:13", "2025-10-29T00:59:50.310Z"),
        ("assistant", "`make test` passes `--cov`, which needs pytest-cov, and "
         "requirements-dev.txt did not list it. I added `pytest-cov>=5`.",
         f"{s}:14", "2025-10-29T00:59:52.777Z"),
        ("assistant", "[tool shell_command] git status --short", f"{s}:18",
         "2025-10-29T01:21:00.000Z"),
        ("tool", "Exit code: 0 Wall time: 0.1 seconds Output: M requirements-dev.txt",
         f"{s}:19", "2025-10-29T01:21:00.400Z"),
        ("assistant", "[tool web_search] pytest-cov unrecognized arguments --cov",
         f"{s}:20", "2025-10-29T01:21:02.000Z"),
        ("user", "thanks!", f"{s}:21", "2025-10-29T03:22:00.000+02:00"),  # offset as given
    ]
    assert rows(t.summaries) == [(
        "summary", "The user asked why `make test` fails on a clean checkout: pytest-cov "
        "was missing from requirements-dev.txt; it was added.",
        f"{s}:17", "2025-10-29T01:20:00.000Z")]
    assert t.ignored == {"system prompt": 1,  # the developer message
                         "harness text": 2,  # AGENTS.md, environment_context
                         "event": 3, "settings": 1, "thinking": 1,
                         "not json": 1}  # a line torn mid-file
    assert t.skipped == 9


def test_codex_legacy_rollout_fixture() -> None:
    t = parse(fixture("codex-legacy.jsonl"))
    s = "5973b6c0-94b8-487b-a530-2aeb6098ae0e"
    start = "2025-04-18T14:02:11.345Z"  # lines carry no time: the session's start
    assert (t.format, t.session_id) == ("codex", s)
    assert rows(t.messages) == [
        ("user", "list the python files here", f"{s}:3", start),
        ("assistant", "[tool shell] ls *.py", f"{s}:4", start),
        ("tool", "app.py setup.py", f"{s}:5", start),
        ("assistant", "Two: app.py and setup.py.", f"{s}:8", start),
    ]
    assert t.summaries == []
    assert t.ignored == {"state": 2, "thinking": 1}


@pytest.mark.parametrize("injected", [
    "<user_instructions>\nbe terse\n</user_instructions>",
    "<ENVIRONMENT_CONTEXT><cwd>/x</cwd></ENVIRONMENT_CONTEXT>",
    "<turn_aborted>interrupted</turn_aborted>",
    "<user_shell_command>ls</user_shell_command>",
])
def test_codex_context_messages_are_not_the_users_words(injected: str) -> None:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ""}]}
    lines = [{"timestamp": "2025-10-29T00:00:00Z", "type": "session_meta",
              "payload": {"id": "c-1", "timestamp": "2025-10-29T00:00:00Z"}}]
    for text in (injected, "real question"):
        content = [{"type": "input_text", "text": text}]
        lines.append({"timestamp": "2025-10-29T00:00:01Z", "type": "response_item",
                      "payload": {**item, "content": content}})
    t = parse(jsonl(*lines))
    assert [(m.content, m.message_id) for m in t.messages] == [("real question", "c-1:3")]


def test_codex_output_shapes() -> None:
    def out(output: Any) -> str:
        t = parse(jsonl({"type": "session_meta", "payload": {"id": "c"}},
                        {"type": "response_item", "payload": {
                            "type": "function_call_output", "call_id": "a", "output": output}}))
        return t.messages[0].content

    assert out([{"type": "input_text", "text": "from"}, {"type": "input_text", "text": "items"}]
               ) == "from items"
    assert out({"content": "denied", "success": False}) == "[error] denied"
    assert out('{"not": "the output shape"}') == '{"not": "the output shape"}'
    assert out(json.dumps({"output": "ok", "metadata": {"exit_code": 0}})) == "ok"


# --- Gemini CLI --------------------------------------------------------------------------

def test_gemini_session_log_fixture() -> None:
    t = parse(fixture("gemini-session.jsonl"))
    assert (t.format, t.session_id) == ("gemini", "9c1e7a52-4d1b-4f0e-8a61-3b2f0c9d7e15")
    assert rows(t.messages) == [
        ("user", "What does the deploy script do?", "m-1", "2026-02-10T23:57:09.000Z"),
        # m-2 was written three times as its tool call progressed: the last version counts.
        ("assistant", "Let me read it.\n[tool read_file] /home/alice/proj/deploy.sh",
         "m-2", "2026-02-10T23:57:11.000Z"),
        ("tool", "#!/bin/sh set -e rsync -a dist/ web:/srv/app ssh web systemctl restart app",
         "read_file-1770767830000-1a2b3c", "2026-02-10T23:57:12.400Z"),
        ("assistant", "It copies dist/ to the web host with rsync and restarts the app "
         "service. It builds nothing.", "m-3", "2026-02-10T23:57:15.000Z"),
        # m-5 and m-6 were rewound.
        ("user", "How would I add a rollback step? Check what is on the host first.",
         "m-7", "2026-02-10T23:58:00.000Z"),
        ("assistant", "Checking the releases on the host.\n"
         "[tool run_shell_command] ssh web ls /srv/releases", "m-8", "2026-02-10T23:58:04.000Z"),
        ("tool", "[error] ssh: Could not resolve hostname web: Name or service not known",
         "run_shell_command-1770767884000-9f8e", "2026-02-10T23:58:06.000Z"),
        ("assistant", "Keep the previous dist/ as releases/<timestamp> and point a `current` "
         "symlink at it; rolling back is switching the symlink.",
         "m-10", "2026-02-10T23:58:20.000Z"),
    ]
    assert t.summaries == []
    # the info notice, two rewound messages, a line torn mid-file
    assert t.ignored == {"notice": 1, "abandoned branch": 2, "not json": 1}


def test_gemini_legacy_session_fixture() -> None:
    t = parse(fixture("gemini-legacy.json"))
    assert (t.format, t.session_id) == ("gemini", "477739d0-1b78-4aa7-9116-02d08c952344")
    assert rows(t.messages) == [
        ("user", "Which Node version does this project need?",
         "553d877e-dd47-42b6-ae51-84d990c8ae10", "2025-12-03T06:35:37.302Z"),
        ("assistant", '[tool search_file_content] "node":',
         "d0d8eed9-9936-4c96-97c1-eb7541b05b2a", "2025-12-03T06:35:51.334Z"),
        ("tool", 'Found 1 match for pattern ""node":" in the workspace directory: --- '
         'File: package.json L12: "node": ">=20.11" ---',
         "search_file_content-1764743737251-810082eb3c63c", "2025-12-03T06:35:52.001Z"),
        ("assistant", 'Node 20.11 or newer: package.json sets `"engines": {"node": '
         '">=20.11"}`.', "2f1c5e7a-3b9d-4e2a-8c6f-0a1b2c3d4e5f", "2025-12-03T06:36:20.000Z"),
    ]
    assert t.ignored == {"notice": 1}  # the warning notice


def test_gemini_checkpoint_fixture() -> None:
    t = parse(fixture("gemini-checkpoint.json"))
    assert (t.format, t.session_id) == ("gemini", None)
    assert rows(t.messages) == [
        ("user", "Rename the function foo to parse_config", "turn-3", None),
        ("assistant", "I'll find where it is defined.\n[tool search_file_content] def foo",
         "turn-4", None),
        ("tool", "Found 1 match: --- File: src/config.py L12: def foo(path): ---",
         "turn-5", None),
        ("assistant", "[tool replace] /home/alice/proj/src/config.py", "turn-6", None),
        ("tool", "Successfully modified file: /home/alice/proj/src/config.py (1 replacements).",
         "turn-7", None),
        ("assistant", "Renamed `foo` to `parse_config` in src/config.py; nothing else called it.",
         "turn-8", None),
    ]
    # Gemini CLI's set-up turn and the model's acknowledgement
    assert t.ignored == {"harness text": 2}


def test_gemini_bare_history_and_compression_summary() -> None:
    history = [
        {"role": "user", "parts": [{"text": "<state_snapshot>\n<overall_goal>ship it"
                                            "</overall_goal>\n</state_snapshot>"}]},
        {"role": "model", "parts": [{"text": "Got it. Thanks for the additional context!"}]},
        {"role": "user", "parts": [{"text": "next step?"}]},
    ]
    t = parse(json.dumps(history, indent=2))
    assert rows(t.messages) == [("user", "next step?", "turn-3", None)]
    assert [(m.role, m.message_id) for m in t.summaries] == [("summary", "turn-1")]
    assert t.skipped == 1


def test_gemini_user_words_are_what_was_typed() -> None:
    t = parse(jsonl(
        {"sessionId": "g", "projectHash": "h"},
        {"id": "1", "type": "user", "displayContent": "summarise @README.md",
         "content": [{"text": "summarise @README.md"},
                     {"text": "--- Content from referenced files ---\n# Readme ..."}]},
    ))
    assert [m.content for m in t.messages] == ["summarise @README.md"]


def test_gemini_subagent_log_is_refused() -> None:
    with pytest.raises(NotTranscript, match="subagent"):
        parse(jsonl({"sessionId": "g", "projectHash": "h", "kind": "subagent"},
                    {"id": "1", "type": "user", "content": "look for X"}))


def test_gemini_checkpoint_environment_is_not_a_user_message() -> None:
    t = parse(fixture("gemini-checkpoint-context.json"))
    assert rows(t.messages) == [
        ("user", "Why does make test fail?", "turn-2", None),
        ("assistant", "The test target passes --cov, which needs pytest-cov.", "turn-3", None),
    ]
    assert t.ignored == {"harness text": 1}  # the <session_context> turn


def test_gemini_session_context_before_a_prompt_in_one_turn_leaves_the_prompt() -> None:
    history = [{"role": "user", "parts": [{"text": "<session_context>\nenv\n</session_context>"
                                                   "\n\nfix the build"}]}]
    assert rows(parse(json.dumps(history)).messages) == [("user", "fix the build", "turn-1",
                                                          None)]


def test_gemini_prompt_log_is_not_a_transcript() -> None:
    text = fixture("gemini-logs.json")
    with pytest.raises(NotTranscript, match="logs.json"):
        detect(text)
    for fmt in ("auto", "gemini"):
        with pytest.raises(NotTranscript, match="logs.json"):
            parse(text, fmt)
    compact = json.dumps(json.loads(text))  # however it is written
    with pytest.raises(NotTranscript):
        parse(compact)


def test_gemini_model_records_are_the_assistants() -> None:
    t = parse(fixture("gemini-model-records.jsonl"))
    assert (t.format, t.session_id) == ("gemini", "6a1f0e2b-9c3d-4e5f-8a7b-0c1d2e3f4a5b")
    assert rows(t.messages) == [
        ("user", "Why does make test fail?", "g-1", "2026-02-11T10:01:00.000Z"),
        ("assistant", "The test target passes --cov, which needs pytest-cov.", "g-2",
         "2026-02-11T10:01:05.000Z"),
    ]
    assert t.ignored == {}
    # Detected from a record alone, too.
    assert detect(jsonl({"id": "g-2", "type": "model", "content": "hi"})) == "gemini"


@pytest.mark.parametrize("name", ["codex-rollout.jsonl", "gemini-session.jsonl"])
def test_a_torn_last_line_is_counted_in_every_agent_format(name: str) -> None:
    text = fixture(name)
    before = parse(text)
    after = parse(text + '{"timestamp": "2026-02-11T00:0')
    assert rows(after.messages) == rows(before.messages)
    assert after.ignored == {**before.ignored, "torn last line": 1}


# --- generic jsonl -----------------------------------------------------------------------

def test_jsonl_good_fixture() -> None:
    t = parse(fixture("jsonl-good.jsonl"))
    assert (t.format, t.session_id, t.skipped, t.summaries) == ("jsonl", None, 0, [])
    assert rows(t.messages) == [
        ("user", "I prefer tabs over spaces in Go code.", "m1", "2026-05-01T09:30:00Z"),
        ("assistant", "Noted: tabs in Go (gofmt does that anyway).", None,
         "2026-05-01T09:30:05Z"),
        ("user", "Remind me: the staging database is db-stage-2.", "m3",
         "2026-05-01T11:30:00+02:00"),
        ("system", "Session ended by the user.", "m4", "2026-05-01T00:00:00Z"),
    ]
    assert [m.tags for m in t.messages] == [["style", "go"], [], [], []]


@pytest.mark.parametrize(("name", "error"), [
    ("jsonl-bad-json.jsonl", "line 3: not valid JSON"),
    ("jsonl-bad-role.jsonl", "line 2: role 'human' is not one of user, assistant"),
    ("jsonl-missing-content.jsonl", "line 3: 'content' must be a non-empty string"),
    ("jsonl-bad-timestamp.jsonl", "line 1: 'timestamp' must be an ISO-8601"),
    ("jsonl-bad-tags.jsonl", "line 1: 'tags' must be a list"),
    ("jsonl-duplicate-id.jsonl", "line 2: id 'm1' is already used on line 1"),
    ("jsonl-not-object.jsonl", "line 2: expected a JSON object"),
])
def test_jsonl_malformed_fixtures(name: str, error: str) -> None:
    for fmt in ("auto", "jsonl"):
        with pytest.raises(DataError) as caught:
            parse(fixture(name), fmt)
        assert caught.value.message.startswith(error)
        assert "\n" not in caught.value.message
        assert caught.value.exit_code == 65


GOOD = {"role": "user", "content": "hello"}


@pytest.mark.parametrize(("line", "error"), [
    ({"content": "hello"}, "'role' must be a non-empty string"),
    ({"role": " ", "content": "hello"}, "'role' must be a non-empty string"),
    ({"role": 1, "content": "hello"}, "'role' must be a non-empty string"),
    ({"role": "user", "content": "  \n "}, "'content' must be a non-empty string"),
    ({"role": "user", "content": ["hello"]}, "'content' must be a non-empty string"),
    ({**GOOD, "id": 7}, "'id' must be a non-empty string"),
    ({**GOOD, "id": ""}, "'id' must be a non-empty string"),
    ({**GOOD, "timestamp": 1714550000}, "'timestamp' must be an ISO-8601"),
    ({**GOOD, "timestamp": "2026-13-01T00:00:00Z"}, "'timestamp' must be an ISO-8601"),
    ({**GOOD, "tags": ["two words"]}, "'tags' must be a list"),
    ({**GOOD, "tags": ["x" * 65]}, "'tags' must be a list"),
    ({**GOOD, "tags": [1]}, "'tags' must be a list"),
    ({**GOOD, "channel": "slack"}, "unknown field 'channel'"),
    ({**GOOD, "content": "x" * (256 * 1024 + 1)}, "'content' is larger than 256 KiB"),
    ('{"role": "user", "content": "bad \\udc80 unicode"}', "'content' is not valid Unicode"),
    ("null", "expected a JSON object"),
])
def test_jsonl_malformed_lines(line: object, error: str) -> None:
    text = jsonl(GOOD, "", line)
    with pytest.raises(DataError, match=f"^line 3: {error}"):
        parse(text, "jsonl")


def test_jsonl_speakers() -> None:
    t = parse(fixture("jsonl-speakers.jsonl"))
    assert [(m.role, m.name, m.content, m.message_id) for m in t.messages] == [
        ("user", "alice", "Can we move the standup to 10:00?", None),
        ("user", "Bob Ng", "Fine by me.", None),  # `speaker`, and no role: a user
        ("assistant", None, "I'll move the invite to 10:00.", None),
        ("assistant", "calendar-bot", "Standup moved.", "m4"),
    ]
    assert t.ignored == {}


@pytest.mark.parametrize(("line", "error"), [
    ({**GOOD, "name": ""}, "'name' must be a string of 1-128 characters without control"),
    ({**GOOD, "name": "   "}, "'name' must be a string of 1-128"),
    ({**GOOD, "name": 7}, "'name' must be a string of 1-128"),
    ({**GOOD, "name": "x" * 129}, "'name' must be a string of 1-128"),
    ({**GOOD, "speaker": "bob\nsmith"}, "'speaker' must be a string of 1-128"),
    ({**GOOD, "speaker": "bell\x07"}, "'speaker' must be a string of 1-128"),
    ('{"role": "user", "name": "bad \\udc80", "content": "x"}', "'name' must be a string"),
    ({**GOOD, "name": "alice", "speaker": "bob"}, "'name' and 'speaker' are the same field"),
    ({"name": "alice"}, "'content' must be a non-empty string"),
    ({"name": "alice", "role": "human", "content": "x"}, "role 'human' is not one of"),
])
def test_jsonl_bad_speakers(line: object, error: str) -> None:
    with pytest.raises(DataError, match=f"^line 3: {error}") as caught:
        parse(jsonl(GOOD, "", line), "jsonl")
    assert "\n" not in caught.value.message


def test_jsonl_speaker_edge_cases() -> None:
    t = parse(jsonl({**GOOD, "name": "x" * 128}, {**GOOD, "name": " Ana ", "speaker": " Ana "},
                    {**GOOD, "name": None}, {**GOOD, "role": None, "speaker": "Zoë"}))
    assert [(m.role, m.name) for m in t.messages] == [
        ("user", "x" * 128), ("user", "Ana"), ("user", None), ("user", "Zoë")]


def test_jsonl_nothing_partial_even_when_the_bad_line_is_last() -> None:
    with pytest.raises(DataError, match="line 4"):
        parse(jsonl(GOOD, GOOD, GOOD, "{"), "jsonl")


def test_jsonl_null_optional_fields_are_absent() -> None:
    t = parse(jsonl({**GOOD, "id": None, "timestamp": None, "tags": None}))
    assert rows(t.messages) == [("user", "hello", None, None)]


@pytest.mark.parametrize(("given", "stored"), [
    ("2026-05-01T09:30:00Z", "2026-05-01T09:30:00Z"),
    ("2026-05-01T09:30:00.123456z", "2026-05-01T09:30:00.123456Z"),
    ("2026-05-01T09:30:00+00:00", "2026-05-01T09:30:00Z"),
    ("2026-05-01T09:30:00-0000", "2026-05-01T09:30:00Z"),
    ("2026-05-01T09:30:00+05:30", "2026-05-01T09:30:00+05:30"),
    ("2026-05-01 09:30:00", "2026-05-01T09:30:00Z"),  # no offset: UTC, as mem reads it
    ("2026-05-01", "2026-05-01T00:00:00Z"),
])
def test_timestamps_are_normalised_to_z_when_utc(given: str, stored: str) -> None:
    t = parse(jsonl({**GOOD, "timestamp": given}))
    assert t.messages[0].created_at == stored


# --- robustness --------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(
    p.name for p in FIXTURES.iterdir() if p.suffix in (".json", ".jsonl")
    and not p.name.startswith(("jsonl-bad", "jsonl-duplicate", "jsonl-missing", "jsonl-not"))
    and p.name not in ("gemini-logs.json", "claude-compaction-agent.jsonl")))
def test_ignored_lines_are_counted_under_short_reasons(name: str) -> None:
    t = parse(fixture(name))
    assert t.skipped == sum(t.ignored.values())
    for reason, count in t.ignored.items():
        assert re.fullmatch(r"[a-z][a-z ]{1,20}[a-z]", reason) and count > 0, reason


def check(text: str, fmt: str) -> None:
    try:
        t = parse(text, fmt)
    except DataError as exc:
        assert exc.message and "\n" not in exc.message
        return
    assert isinstance(t, Transcript) and t.skipped >= 0
    if not t.messages and not t.summaries:
        # Nothing to keep: an empty file, or one the format asked for recognises as its own.
        blank = not text.removeprefix("\ufeff").strip()
        assert blank or detect(text) == t.format, (text, fmt)
        assert t.format == fmt or (fmt == "auto" and t.format in FORMATS)
        return
    assert t.format in FORMATS
    for m in (*t.messages, *t.summaries):
        assert isinstance(m.content, str) and m.content.strip()
        m.content.encode("utf-8")
        assert m.message_id is None or isinstance(m.message_id, str)
        assert m.created_at is None or isinstance(m.created_at, str)


@settings(max_examples=examples(300), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=st.text(), fmt=st.sampled_from(("auto", *FORMATS)))
def test_any_text_parses_or_is_a_data_error(text: str, fmt: str) -> None:
    check(text, fmt)


# JSON made of the words these formats use, so that the parsers' deeper paths run.
KEYS = ["type", "uuid", "parentUuid", "logicalParentUuid", "sessionId", "message", "content",
        "role", "id", "text", "name", "input", "tool_use_id", "isMeta", "isSidechain",
        "isCompactSummary", "timestamp", "payload", "arguments", "output", "call_id",
        "projectHash", "messages", "toolCalls", "args", "result", "functionCall",
        "functionResponse", "response", "parts", "history", "$set", "$rewindTo", "tags",
        "record_type", "action", "command", "model", "thought", "displayContent", "kind"]
WORDS = ["user", "assistant", "gemini", "model", "summary", "system", "message",
         "response_item", "session_meta", "compacted", "event_msg", "function_call",
         "function_call_output", "custom_tool_call", "local_shell_call", "web_search_call",
         "tool_use", "tool_result", "text", "thinking", "state", "u1", "u2", "a1",
         "2025-06-01T10:00:00Z", "not a time", "<synthetic>", "<environment_context>", ""]
SCALARS = (st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(WORDS)
           | st.text(max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.sampled_from(KEYS), inner, max_size=5),
                      max_leaves=25)
LINES = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=7).map(json.dumps) | \
    st.sampled_from(["", "{", "garbage", "[]", "null"])


@settings(max_examples=examples(300), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(LINES, max_size=12), fmt=st.sampled_from(("auto", *FORMATS)),
       whole=st.booleans())
@pytest.mark.slow
def test_json_shaped_input_parses_or_is_a_data_error(lines: list[str], fmt: str,
                                                     whole: bool) -> None:
    if whole:  # one JSON document (the Gemini session and checkpoint shapes)
        check(json.dumps([json.loads(x) for x in lines if x.startswith("{") and x != "{"]), fmt)
    check("\n".join(lines), fmt)


def test_deeply_nested_json_is_a_data_error_not_a_crash() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    for fmt in ("auto", *FORMATS):
        with pytest.raises(DataError):
            parse(deep + "\n" + '{"type": "user", "message": ' + deep + "}", fmt)


def test_import_stays_light() -> None:
    code = ("import sys, memvault.text.transcripts; "
            "print(sorted({'cryptography', 'tantivy'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
