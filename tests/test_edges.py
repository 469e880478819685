"""Inputs at the edges: dates at the ends of the calendar in every date flag and tool
argument, and working directories that are gone or cannot be named.

Every date is either an answer or one usage error line (exit 2), never a crash; every
unusable working directory means working without a project: the command still answers
(`--project auto` says so on stderr), the MCP server still starts, and the SessionStart
hook still gives the brief.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pytest_console_scripts import ScriptRunner

from memvault.config import resolve
from memvault.errors import UsageError
from memvault.index.when import instant, window
from memvault.integrations import claude_code
from memvault.model.records import Filters, NewMessage, parse_time
from memvault.ops import recall, remember
from memvault.ops.admin import init
from memvault.ops.ingest import add_messages
from memvault.ops.projects import working_project
from memvault.ops.recall import search
from memvault.vault.vault import Vault
from tests.conftest import examples, mem, one_error_line

MEM = Path(sys.executable).parent / "mem"
FACT = "Prefers green tea in the afternoon"

# --- dates ---------------------------------------------------------------------------------

EXTREMES = [
    "9999-12-31", "9999-12-31T23:59:59.999999", "9999-12-31T23:59:59.999999Z",
    "9999-12-31T23:59:59-14:00", "9999-12-31T10:00+14:00", "0001-01-01",
    "0001-01-01T00:00:00+14:00", "0001-01-01T00:00:00-14:00", "0000-01-01", "-0001-01-01",
    "10000-01-01", "99999999999", "1e308", "1700000000.5", "-1.5", "2026-06-30T23:59:60",
    "2016-12-31T23:59:60Z", "2026-01-01T00:00+14:00", "2026-01-01T00:00-14:00",
    "2026-01-01T00:00+24:00", "yesterday", "", " ", "2026-02-30", "\u0663\u0660\u0662\u0666",
]


def _year(y: int) -> str:
    return f"{y:04d}" if y >= 0 else f"-{-y:04d}"


_offsets = st.one_of(st.just(""), st.just("Z"), st.builds(
    lambda sign, h, m: f"{sign}{h:02d}:{m:02d}", st.sampled_from("+-"),
    st.integers(0, 25), st.integers(0, 60)))
_clock = st.one_of(st.just(""), st.builds(
    lambda h, m, s, frac, off: f"T{h:02d}:{m:02d}:{s:02d}{frac}{off}",
    st.integers(0, 24), st.integers(0, 60), st.integers(0, 61),
    st.sampled_from(["", ".5", ".999999", ".0000001"]), _offsets))
_zones = st.builds(timezone, st.timedeltas(min_value=timedelta(hours=-14),
                                           max_value=timedelta(hours=14)))
DATES = st.one_of(
    st.builds(lambda y, mo, d, t: f"{_year(y)}-{mo:02d}-{d:02d}{t}",
              st.one_of(st.sampled_from([0, 1, 2, 1969, 1970, 9998, 9999, 10000]),
                        st.integers(-99999, 99999)),
              st.integers(0, 13), st.integers(0, 32), _clock),
    st.datetimes(timezones=_zones).map(lambda d: d.isoformat()),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.text(max_size=24),
)
FLAGS = [("search", "tea yesterday last week", "--as-of"),
         ("search", "tea two days ago", "--after"), ("search", "tea", "--before"),
         ("list", None, "--after"), ("list", None, "--before"),
         ("forget", None, "--before")]


def check_date_answer(result: Any) -> None:
    """An answer (0; forget: 66 when nothing matches) or one usage error line (2)."""
    assert result.returncode in (0, 2, 66), result.stderr
    if result.returncode:
        line = one_error_line(result.stderr)
        assert "unexpected" not in line


@pytest.mark.parametrize(("command", "query", "flag"), FLAGS,
                         ids=[f"{c}{f}" for c, _, f in FLAGS])
@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=DATES)
@example(value="9999-12-31")
@example(value="0001-01-01T00:00:00+14:00")
@example(value="9999-12-31T23:59:59-14:00")
@example(value="2016-12-31T23:59:60Z")
@example(value="1700000000.5")
@example(value="0001-01-01")
def test_every_date_flag_answers_or_is_a_usage_error(
        script_runner: ScriptRunner, vault: Vault, command: str, query: str | None,
        flag: str, value: str) -> None:
    if not vault.exists():
        remember.add(vault, FACT, "fact")
    args = [command, *([query] if query else []), f"{flag}={value}", "--json"]
    if command == "forget":
        args.append("--dry-run")
    check_date_answer(mem(script_runner, *args))


def test_the_last_and_first_days_are_answers(script_runner: ScriptRunner,
                                             vault: Vault) -> None:
    remember.add(vault, FACT, "fact")
    for value in ("9999-12-31", "9999-12-31T23:59:59.999999Z"):
        result = mem(script_runner, "search", "tea", "--as-of", value, "--json")
        assert result.returncode == 0, result.stderr
        assert [r["content"] for r in json.loads(result.stdout)["results"]] == [FACT]
    result = mem(script_runner, "search", "tea yesterday", "--as-of", "0001-01-01", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["results"] == []  # nothing is that old


@settings(max_examples=examples(300))
@given(value=DATES)
@example(value="9999-12-31T23:59:59-14:00")
@example(value="0001-01-01T00:00:00+14:00")
def test_a_parsed_date_is_a_utc_time_or_a_usage_error(value: str) -> None:
    try:
        parsed = parse_time(value)
    except UsageError as exc:
        assert "\n" not in exc.message
        return
    assert parsed.astimezone(UTC).tzinfo is UTC
    int(parsed.timestamp() * 1e6)  # what the index's range query takes


# What a phrase means for each flag: --after from the start of the time it names,
# --before before that start, --as-of to its end (docs/cli.md, the flags' help).
PHRASES = ["yesterday", "today", "the day before yesterday", "this morning", "last week",
           "last weekend", "last month", "last year", "last Tuesday", "this week",
           "this month", "this year", "3 days ago", "two months ago", "a year ago",
           "a few weeks ago", "Last  WEEK"]
WINDOW_FLAGS = [("list", "--after"), ("list", "--before"), ("search", "--as-of"),
                ("forget", "--before")]


def test_a_phrase_names_its_calendar_time_exactly() -> None:
    now = datetime(2026, 3, 12, 15, 0, tzinfo=timezone(timedelta(hours=2)))  # a Thursday

    def days(phrase: str) -> tuple[str, str]:
        named = window(phrase, now)
        assert named is not None, phrase
        return named.start.isoformat()[:16], named.end.isoformat()[:16]

    assert days("yesterday") == ("2026-03-11T00:00", "2026-03-12T00:00")
    assert days("this afternoon") == ("2026-03-12T12:00", "2026-03-12T18:00")
    assert days("last week") == ("2026-03-02T00:00", "2026-03-09T00:00")  # Monday to Monday
    assert days("last month") == ("2026-02-01T00:00", "2026-03-01T00:00")
    assert days("this year") == ("2026-01-01T00:00", "2027-01-01T00:00")
    assert days("3 days ago") == ("2026-03-09T00:00", "2026-03-10T00:00")
    assert days("two months ago") == ("2026-01-11T00:00", "2026-01-12T00:00")  # 60 days
    assert window("what I did yesterday", now) is None  # a query, not a phrase
    assert window("2026-03-01", now) is None
    with pytest.raises(UsageError, match="outside the calendar"):
        instant("yesterday", datetime(1, 1, 1, tzinfo=UTC), end=False, field="after")
    assert instant("2026-03-01", now, end=True, field="as_of") == \
        datetime(2026, 3, 1, 23, 59, 59, 999999, tzinfo=UTC)  # a bare date: the whole day


@dataclass(frozen=True)
class Dated:
    env: dict[str, str]  # where the vault is, for `mem`
    created: dict[str, str]  # memory id: creation time


@pytest.fixture(scope="module")
def dated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dated]:
    """One message at noon (local time) on days across the last two years and tomorrow:
    no window edge (midnight, Monday, the 1st) falls near a record."""
    home = tmp_path_factory.mktemp("dated")
    env = {"MEM_VAULT": str(home / "vault"), "MEM_CONFIG_DIR": str(home / "config"),
           "MEM_USER": "alice"}
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("MEM_")]:
            patch.delenv(name)  # made before any test's own environment: none of theirs
        for name, value in env.items():
            patch.setenv(name, value)
        init(resolve())
        noon = datetime.now().astimezone().replace(hour=12, minute=0, second=0,
                                                   microsecond=0)
        days = [*range(-1, 16), *range(16, 120, 5), *range(120, 800, 29)]
        add_messages(Vault(resolve()), "days", [
            NewMessage(f"kayak day {d}", "user", f"d{d}",
                       (noon - timedelta(days=d)).isoformat()) for d in days])
        listed = recall.list_records(Vault(resolve()), Filters(limit=1000)).to_dict()
    yield Dated(env, {r["memory_id"]: r["created_at"] for r in listed["records"]})


@pytest.mark.parametrize(("command", "flag"), WINDOW_FLAGS,
                         ids=[f"{c}{f}" for c, f in WINDOW_FLAGS])
@settings(max_examples=6, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(phrase=st.one_of(st.sampled_from(PHRASES),
                        st.integers(1, 900).map(lambda n: f"{n} days ago")))
@example(phrase="last week")
@example(phrase="yesterday")
def test_a_time_phrase_selects_what_its_window_means_for_each_flag(
        script_runner: ScriptRunner, dated: Dated, command: str, flag: str,
        phrase: str) -> None:
    args = {"list": ["list", "--limit", "1000"], "search": ["search", "", "--limit", "1000"],
            "forget": ["forget", "--dry-run"]}[command]
    asked = datetime.now().astimezone()
    result = mem(script_runner, *args, flag, phrase, "--json", **dated.env)
    answered = datetime.now().astimezone()
    assert result.returncode in (0, 66), result.stderr  # forget: 66 when nothing matches
    doc = json.loads(result.stdout) if result.returncode == 0 else {"memory_ids": []}
    got = set(doc["memory_ids"]) if command == "forget" else \
        {r["memory_id"] for r in doc["records" if command == "list" else "results"]}

    def expected(now: datetime) -> set[str]:
        named = window(phrase, now)
        assert named is not None
        if flag == "--after":
            return {i for i, at in dated.created.items() if parse_time(at) >= named.start}
        if flag == "--before":
            return {i for i, at in dated.created.items() if parse_time(at) < named.start}
        return {i for i, at in dated.created.items() if parse_time(at) < named.end}

    # The command read the clock between these two moments (a midnight may pass).
    assert got in (expected(asked), expected(answered)), (phrase, flag)


def test_a_date_flag_that_is_not_understood_names_the_flag_and_gives_examples(
        script_runner: ScriptRunner, vault: Vault) -> None:
    for flag, args in (("--after", ["list", "--after", "lst week"]),
                       ("--as-of", ["search", "x", "--as-of", "soon"]),
                       ("--before", ["forget", "--before", "a while ago", "--dry-run"])):
        result = mem(script_runner, *args)
        assert result.returncode == 2, args
        line = one_error_line(result.stderr)
        assert line.startswith(f"mem: error: {flag} '")
        assert "yesterday, last week, 3 days ago" in line and "2026-05-01" in line


def test_mcp_date_arguments_answer_or_are_refused_in_plain_words(vault: Vault) -> None:
    pytest.importorskip("mcp", reason="the optional extra memvault[mcp] is not installed")
    import anyio
    from mcp.client import Client

    from memvault.integrations import mcp_server

    remember.add(vault, FACT, "fact")
    server = mcp_server.build(vault)
    answers: list[tuple[str, bool, str]] = []

    async def main() -> None:
        async with Client(server) as client:
            for value in EXTREMES:
                for name in ("after", "before"):
                    got = await client.call_tool("memory_search",
                                                 {"query": "tea", name: value})
                    answers.append((value, got.is_error, got.content[0].text))

    anyio.run(main)
    for value, failed, text in answers:
        if failed:
            assert "unexpectedly" not in text and "Traceback" not in text, (value, text)
    assert any(v == "9999-12-31" and not failed for v, failed, _ in answers)


# --- working directories -------------------------------------------------------------------


def in_gone_directory(tmp_path: Path, *args: str, stdin: bytes = b""
                      ) -> subprocess.CompletedProcess[bytes]:
    """Run mem in a working directory removed before it starts."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = 'cd "$0" && rmdir "$0" && exec "$@"'
    return subprocess.run(["sh", "-c", script, str(gone), str(MEM), *args], input=stdin,
                          capture_output=True, timeout=60, check=False)


def test_project_auto_in_a_deleted_directory_answers_without_a_project(
        vault: Vault, tmp_path: Path) -> None:
    remember.add(vault, FACT, "fact")
    for args in (("search", "tea", "--project", "auto", "--json"),
                 ("brief", "--project", "auto", "--json")):
        result = in_gone_directory(tmp_path, *args)
        assert result.returncode == 0, result.stderr
        assert FACT in result.stdout.decode()
        warning = result.stderr.decode().splitlines()
        assert len(warning) == 1 and "no project is used" in warning[0], warning


def test_a_project_scope_install_in_a_deleted_directory_is_one_line(tmp_path: Path) -> None:
    result = in_gone_directory(tmp_path, "hooks", "install", "claude-code", "--scope",
                               "project")
    assert result.returncode == 66
    line = one_error_line(result.stderr.decode())
    assert "current directory" in line


def test_the_mcp_server_starts_in_a_deleted_directory(vault: Vault, tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the optional extra memvault[mcp] is not installed")
    remember.add(vault, FACT, "fact")
    calls = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "memory_search", "arguments": {"query": "tea"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "memory_store", "arguments": {"type": "fact",
                                                  "content": "Owns a blue kettle"}}},
    ]
    gone = tmp_path / "gone"
    gone.mkdir()
    server = subprocess.Popen(["sh", "-c", 'cd "$0" && rmdir "$0" && exec "$@"', str(gone),
                               str(MEM), "mcp"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    answers = {}
    try:
        for call in calls:
            server.stdin.write((json.dumps(call) + "\n").encode())
            server.stdin.flush()
            if "id" in call:
                answer = json.loads(server.stdout.readline())
                answers[answer["id"]] = answer
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    found = answers[2]["result"]["structuredContent"]["results"]
    assert [h["content"] for h in found] == [FACT]
    stored = answers[3]["result"]
    assert not stored["isError"], stored
    assert not [t for t in stored["structuredContent"]["tags"] if t.startswith("project:")]


CWDS: dict[str, Any] = {
    "deleted": lambda tmp: str(tmp / "deleted"),
    "longer than PATH_MAX": lambda tmp: str(tmp) + "/a" * 3000,
    "a NUL": lambda tmp: f"{tmp}/a\x00b",
    "not UTF-8": lambda tmp: f"{tmp}/caf\udce9",
    "a file": lambda tmp: str(tmp / "file"),
    "a name too long": lambda tmp: f"{tmp}/{'x' * 300}",
}


@pytest.mark.parametrize("kind", list(CWDS))
def test_session_start_gives_the_brief_whatever_the_cwd(
        vault: Vault, tmp_path: Path, kind: str) -> None:
    remember.add(vault, "Always answer in British English", "instruction")
    (tmp_path / "file").write_text("not a directory")
    cwd = CWDS[kind](tmp_path)
    assert working_project(vault, cwd) is None
    payload = json.dumps({"hook_event_name": "SessionStart", "session_id": "s1",
                          "cwd": cwd})
    answer = claude_code.handle(resolve, payload)
    assert answer is not None, kind
    context = json.loads(answer)["hookSpecificOutput"]["additionalContext"]
    assert "British English" in context


def test_a_directory_named_in_bytes_that_are_not_utf8_is_a_project(
        vault: Vault, tmp_path: Path) -> None:
    remember.add(vault, "Always answer in British English", "instruction")
    named = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9")
    os.mkdir(named)
    assert working_project(vault, named) is not None
    answer = claude_code.handle(resolve, json.dumps(
        {"hook_event_name": "SessionStart", "session_id": "s1", "cwd": named}))
    assert answer is not None and "British English" in answer


def test_a_usable_directory_is_still_a_project(vault: Vault, tmp_path: Path) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "src").mkdir()
    tag = working_project(vault, tmp_path / "repo" / "src")
    assert tag is not None and tag == working_project(vault, tmp_path / "repo")
    remember.add(vault, FACT, "fact", tags=[tag])
    found = search(vault, "tea", Filters(tags=[tag]))
    assert [h.content for h in found.results] == [FACT]
