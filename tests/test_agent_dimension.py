"""The agent a session came from: set by ingest from the transcript's format, kept in the
record (only when there is one), indexed keyed like the session, filtered by `--agent`,
and carried by export, import and sync. The real sessions are
../shared/bench-data/transcripts, read in place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.errors import UsageError
from memvault.model.records import AGENTS, Filters, Record
from memvault.ops import portability
from memvault.ops import sync as sync_ops
from memvault.ops.ingest import ingest_file, ingest_text
from memvault.ops.remember import add
from memvault.storage.remote import FolderRemote
from memvault.vault.vault import Vault
from tests.conftest import mem, one_error_line
from tests.test_sync import contents, machine

REAL = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "transcripts"
SESSIONS = {
    "claude-code": REAL / "claude-code" / "short.jsonl",
    "codex": REAL / "codex" / "rollout-vibe-codex-0.39.jsonl",
    "gemini": REAL / "gemini" / "session-vibe-gemini.jsonl",
}


@pytest.fixture
def real() -> dict[str, Path]:
    if not all(p.is_file() for p in SESSIONS.values()):
        pytest.skip("the shared bench data is not here")
    return SESSIONS


def mem_json(script_runner: ScriptRunner, *args: str) -> Any:
    result = mem(script_runner, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def agents_of(vault: Vault) -> dict[str | None, int]:
    seen: dict[str | None, int] = {}
    for record in vault.store.records():
        seen[record.agent] = seen.get(record.agent, 0) + 1
    return seen


def test_the_agents_are_the_registry_formats_but_generic_json_lines() -> None:
    from memvault.text.transcripts import FORMATS

    assert set(AGENTS) == set(FORMATS) - {"jsonl"}


def test_each_real_transcript_gives_records_of_its_agent(
        vault: Vault, real: dict[str, Path]) -> None:
    for agent, path in real.items():
        result = ingest_file(vault, path)
        assert result.messages_added > 0
        stored = [r for r in vault.store.records() if r.session_id == result.session_id
                  and r.type == "message"]
        assert stored and {r.agent for r in stored} == {agent}, agent


def test_a_scan_sets_each_files_agent(script_runner: ScriptRunner, vault: Vault,
                                      real: dict[str, Path]) -> None:
    # A scan stores small transcripts in batches (read ahead by a helper): same agents.
    doc = mem_json(script_runner, "ingest", "--scan", str(REAL))
    assert doc["files_ingested"] >= 3
    seen = agents_of(vault)
    assert set(seen) == {"claude-code", "codex", "gemini"}, seen


def test_search_and_list_by_agent_return_only_that_agents(
        script_runner: ScriptRunner, vault: Vault, real: dict[str, Path]) -> None:
    for path in real.values():
        ingest_file(vault, path)
    add(vault, "python runs the deploy from the codex branch on fridays", "fact")
    assert {h["agent"] for h in mem_json(script_runner, "search", "python", "--limit",
                                         "1000", "--all")["results"]} >= {"codex", None}
    codex = {r.memory_id for r in vault.store.records() if r.agent == "codex"}
    assert codex
    for args in (("search", "", "--agent", "codex", "--limit", "1000"),
                 # "python" is in Codex's and Gemini's sessions, and in the fact.
                 ("search", "python", "--agent", "codex", "--limit", "1000", "--all"),
                 ("list", "--agent", "codex", "--limit", "10000")):
        doc = mem_json(script_runner, *args)
        found = doc["results" if args[0] == "search" else "records"]
        assert found and {r["memory_id"] for r in found} <= codex, args
        assert {r["agent"] for r in found} == {"codex"}
    everything = mem_json(script_runner, "list", "--agent", "gemini", "--limit", "10000")
    assert {r["memory_id"] for r in everything["records"]} == {
        r.memory_id for r in vault.store.records() if r.agent == "gemini"}


def test_an_unknown_agent_is_one_line_and_a_usage_error(script_runner: ScriptRunner,
                                                  vault: Vault) -> None:
    for command in ("search", "list"):
        result = mem(script_runner, command, "--agent", "cladue-code")
        assert result.returncode == UsageError.exit_code
        line = one_error_line(result.stderr)
        assert "cladue-code" in line and "claude-code" in line
    with pytest.raises(UsageError, match="unknown agent"):
        Filters(agent="jsonl")


def test_a_typed_memory_and_generic_json_lines_have_no_agent(vault: Vault) -> None:
    added = add(vault, "prefers tabs over spaces", "preference").record
    ingest_text(vault, json.dumps({"id": "m1", "role": "user", "content": "hello there"}),
                None, "jsonl", session="generic")
    assert agents_of(vault) == {None: 2}
    assert "agent" not in added.stored()
    # Written as earlier releases wrote it: no `agent` key in the sealed document.
    assert all("agent" not in r.stored() for r in vault.store.records())


def test_an_old_record_without_the_field_reads_and_indexes_as_before(
        script_runner: ScriptRunner, vault: Vault, real: dict[str, Path]) -> None:
    ingest_file(vault, real["codex"])
    record = next(r for r in vault.store.records() if r.agent == "codex")
    old = record.stored()
    del old["agent"]
    assert Record.from_stored(old).agent is None
    # An older release reads a newer record: unknown fields are left out, not refused.
    assert Record.from_stored({**old, "a_field_of_later": 1}).content == record.content
    # A malformed agent is no agent, not an error.
    assert Record.from_stored({**old, "agent": 7}).agent is None
    # An index of the previous format is rebuilt once, and then filters by agent.
    meta = vault.layout.index_dir / "mem-index.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "format": 6}))
    doc = mem_json(script_runner, "search", "", "--agent", "codex", "--limit", "5")
    assert doc["results"] and {r["agent"] for r in doc["results"]} == {"codex"}
    from memvault.index.keyed import INDEX_FORMAT
    assert json.loads(meta.read_text())["format"] == INDEX_FORMAT


def test_export_then_import_keeps_the_agent(vault: Vault, real: dict[str, Path],
                                            tmp_path: Path) -> None:
    import io

    from tests.conftest import open_as

    ingest_file(vault, real["gemini"])
    add(vault, "a typed fact", "fact")
    out = io.StringIO()
    portability.export(vault, out)
    target = open_as("bob")
    portability.import_text(target, out.getvalue())
    before = {r.memory_id: r.agent for r in vault.store.records()}
    after = {r.memory_id: r.agent for r in target.store.records()}
    assert after == before and "gemini" in after.values() and None in after.values()


def test_sync_carries_the_agent(tmp_path: Path, real: dict[str, Path]) -> None:
    (tmp_path / "remote").mkdir()
    remote = FolderRemote(str(tmp_path / "remote"), tmp_path / "remote")
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    ingest_file(a, real["codex"])
    sync_ops.sync(a, remote)
    sync_ops.sync(b, remote)
    assert contents(a) == contents(b)
    assert {r.memory_id: r.agent for r in b.store.records()} == {
        r.memory_id: r.agent for r in a.store.records()}
    assert set(agents_of(b)) == {"codex"}
    from memvault.ops import recall

    found = recall.search(b, "", Filters(agent="codex", limit=1000))
    assert found.results and {h.agent for h in found.results} == {"codex"}


def test_the_mcp_search_filters_by_agent(vault: Vault, real: dict[str, Path]) -> None:
    pytest.importorskip("mcp", reason="the optional extra memvault[mcp] is not installed")
    from typing import get_args

    import anyio
    from mcp.client import Client

    from memvault.integrations import mcp_server

    assert get_args(mcp_server.Agent) == AGENTS
    for agent in ("codex", "gemini"):
        ingest_file(vault, real[agent])
    codex = {r.memory_id for r in vault.store.records() if r.agent == "codex"}

    async def main() -> None:
        async with Client(mcp_server.build(vault)) as client:
            found = await client.call_tool("memory_search", {
                "query": "python", "agent": "codex", "limit": 20})
            assert not found.is_error, found.content[0].text
            hits = found.structured_content["results"]
            assert hits and {h["memory_id"] for h in hits} <= codex
            wrong = await client.call_tool("memory_search", {"query": "python",
                                                             "agent": "jsonl"})
            assert wrong.is_error

    anyio.run(main)


def test_the_viewer_shows_filters_and_charts_by_agent(vault: Vault,
                                                      real: dict[str, Path]) -> None:
    pytest.importorskip("textual")
    from textual.widgets import DataTable

    from tests.test_browse import drive, listed, text_of

    sessions = {agent: ingest_file(vault, real[agent]).session_id
                for agent in ("codex", "gemini")}
    add(vault, "python is pinned to 3.11 on the build hosts", "fact")
    codex = {r.memory_id for r in vault.store.records() if r.agent == "codex"}

    async def script(app: Any, pilot: Any) -> None:
        await pilot.press("tab", *"agent:codex")  # the filters box
        await pilot.pause()
        assert listed(app) and set(listed(app)) <= codex
        await pilot.press("escape", "2")  # the timeline: each session with its agent
        await pilot.pause(0.3)
        table = app.query_one("#sessions", DataTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        for agent, session in sessions.items():
            assert [session, agent] in [[r[-1], r[2]] for r in rows], rows
        await pilot.press("5")  # the status page: stored per week, split by agent
        await pilot.pause()
        chart = text_of(app, "#status-text").split("stored per week")[1]
        rows = {line.split()[1] for line in chart.splitlines()[1:] if line.strip()}
        assert {"codex", "gemini", "typed"} <= rows, chart

    drive(vault, script)
