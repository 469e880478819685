"""Reads do not grow the vault: the audit log gets one entry per kind of read, actor and
day, and reads.json notes the day each session was last read, which compaction honours."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_console_scripts import ScriptRunner

from memvault.config import CompactionConfig
from memvault.model.location import session_file
from memvault.model.records import Filters, NewMessage
from memvault.ops import brief, compact, ingest, recall, remember
from memvault.vault.vault import Vault
from tests.conftest import mem, open_as
from tests.test_compact import messages, summaries


def grown(user: Path) -> int:
    return sum(p.stat().st_size for p in user.iterdir() if p.is_file())


def test_reads_add_at_most_100_bytes_each_on_average(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    for i in range(30):
        remember.add(vault, f"fact number {i} about the garden", "fact")
    ingest.add_messages(vault, "s1", [NewMessage(f"the garden needs water {i}", "user",
                                                 f"m{i}") for i in range(30)])
    user = vault_dir / "default" / "alice"
    before, reads = grown(user), 40
    for _ in range(reads):
        assert len(recall.search(open_as("alice"), "garden", Filters()).results) == 10
        assert brief.build(open_as("alice"), 50, 8000).brief_count == 30
    assert (grown(user) - before) / (2 * reads) <= 100
    # What the log says: the first search and the first brief of the day, chained.
    doc = json.loads(mem(script_runner, "audit", "--json").stdout)
    assert doc["chain_ok"] is True
    assert [e["op"] for e in doc["entries"]].count("search") == 1
    assert [e["op"] for e in doc["entries"]].count("brief") == 1
    assert mem(script_runner, "verify").returncode == 0
    # Another actor's first read of the day is logged too.
    mem(script_runner, "search", "garden", MEM_ACTOR="cron")
    entries = json.loads(mem(script_runner, "audit", "--json").stdout)["entries"]
    assert [(e["op"], e["actor"]) for e in entries][-1] == ("search", "cron")


def test_compaction_spares_a_session_read_lately_however_many_reads_came_before(
        script_runner: ScriptRunner, vault: Vault) -> None:
    ingest.add_messages(vault, "old", messages(30, days_ago=200, word="ancient"))
    ingest.add_messages(vault, "read", messages(30, days_ago=200, word="consulted"))
    ingest.add_messages(vault, "shown", messages(30, days_ago=200, word="opened"))
    fact = remember.add(vault, "Keeps bees in the garden", "fact").record.memory_id
    for _ in range(3):  # the day's first search and show are audited; later ones are not
        recall.search(open_as("alice"), "garden", Filters())
        recall.show(open_as("alice"), fact)
    mem(script_runner, "search", "consulted")
    shown = vault.store.read_lines(session_file("shown"))[3].memory_id
    mem(script_runner, "show", shown)
    entries = json.loads(mem(script_runner, "audit", "--json").stdout)["entries"]
    assert [e["op"] for e in entries].count("search") == 1
    assert [e["op"] for e in entries].count("show") == 1
    out = compact.compact_user(open_as("alice"), CompactionConfig())
    assert out.archived == 30
    assert [s.session_id for s in summaries(open_as("alice"))] == ["old"]
