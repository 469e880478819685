"""Embedding: records become sealed vectors after they are stored (`mem embed`, and in the
background after a write), resumably, never bringing back what was forgotten."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.config import resolve
from memvault.embed.builtin import load
from memvault.errors import ConfigError
from memvault.model.records import Filters
from memvault.ops import embed, forget, recall, remember
from memvault.ops.compact import Job as CompactJob
from memvault.vault.vault import Vault
from tests.conftest import mem, open_as

MEM = Path(sys.executable).parent / "mem"
FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
FACTS = ("Prefers pytest with fixtures", "Works on the billing service",
         "Deploys with terraform on Fridays", "Lives in Lisbon", "Uses vim keybindings")


def store(vault: Vault) -> Any:
    return vault.vector_store(vault.state().key_version)


class Counting:
    """The built-in model, with a hook called before each batch is returned."""

    def __init__(self, before: Any = None) -> None:
        self.inner = load()
        self.model = self.inner.model
        self.calls = 0
        self.before = before

    def embed(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        out = self.inner.embed(texts)
        if self.before is not None:
            self.before(self.calls)
        return out


def test_embedding_finds_by_meaning_what_words_miss(vault: Vault) -> None:
    ids = [remember.add(vault, text, "fact").record.memory_id for text in FACTS]
    assert embed.pending_count(vault) == len(FACTS)
    question = "how does the user like to test"
    # "test" is a stem of no word of the records ("pytest" is one word): words miss it
    assert recall.search(vault, question, Filters()).results == ()

    result = embed.embed_pending(vault, load())
    assert (result.users, result.embedded, result.pending) == (1, len(FACTS), 0)
    assert result.model == load().model.key()
    assert embed.pending_count(vault) == 0
    hits = store(vault).search(load().embed([question])[0], 1)
    assert hits[0].memory_id == ids[0]
    # A second run finds nothing to do.
    assert embed.embed_pending(vault, load()).embedded == 0


def test_a_stopped_run_keeps_its_batches_and_the_next_one_continues(vault: Vault) -> None:
    for text in FACTS:
        remember.add(vault, text, "fact")

    def stop(call: int) -> None:
        if call == 2:
            raise KeyboardInterrupt  # Ctrl-C while the second batch is embedded

    with pytest.raises(KeyboardInterrupt):
        embed.embed_pending(vault, Counting(stop), batch=2)
    assert store(vault).count() == 2  # the first batch was added and kept
    assert embed.pending_count(vault) == len(FACTS) - 2
    again = Counting()
    result = embed.embed_pending(vault, again, batch=2)
    assert (result.embedded, result.pending) == (len(FACTS) - 2, 0)
    assert again.calls == 2  # only what was left was embedded


def test_a_record_forgotten_while_it_is_embedded_gets_no_vector(vault: Vault) -> None:
    ids = [remember.add(vault, text, "fact").record.memory_id for text in FACTS]
    session = remember.add(vault, "We chose postgres for the ledger", "message",
                           session="s1").record.memory_id

    def forget_some(call: int) -> None:  # a forget lands between the read and the add
        other = Vault(resolve())
        forget.forget(other, forget.select(other, [ids[0], session]))

    result = embed.embed_pending(vault, Counting(forget_some))
    held = store(vault).has()
    assert ids[0] not in held and session not in held
    assert set(ids[1:]) <= set(held)
    assert result.embedded == len(FACTS) - 1
    assert embed.embed_pending(vault, load()).embedded == 0  # nothing comes back later


def test_embed_new_embeds_only_what_it_is_given(vault: Vault) -> None:
    first = remember.add(vault, FACTS[0], "fact").record.memory_id
    second = remember.add(vault, FACTS[1], "fact").record.memory_id
    assert embed.embed_new(vault, load(), [second, "01a0000000000000000000000000"]) == 1
    assert set(store(vault).has()) == {second}
    assert embed.pending_count(vault) == 1 and first


def test_another_model_is_refused_until_rebuild(vault: Vault) -> None:
    from dataclasses import replace

    remember.add(vault, FACTS[0], "fact")
    embed.embed_pending(vault, load())

    class Other:
        model = replace(load().model, model="another")

        def embed(self, texts: Sequence[str]) -> Any:
            return load().embed(texts)

    with pytest.raises(ConfigError) as refused:
        embed.embed_pending(vault, Other())
    assert refused.value.hint == "embed-rebuild"
    result = embed.embed_pending(vault, Other(), rebuild=True)
    assert (result.embedded, result.pending) == (1, 0)
    assert store(vault).model() == Other.model


def test_shards_and_all_users_cover_every_user_once(
        script_runner: ScriptRunner, vault: Vault) -> None:
    users = [f"u{n}" for n in range(6)]
    for name in users:
        remember.add(open_as(name), f"{name} prefers pytest", "fact")
    job = CompactJob(vault.settings, vault.master, vault.settings.compaction, False)
    split = [embed.users(embed.Job(job.settings, job.master, False), None, (k, 3))
             for k in range(3)]
    everyone = [u for part in split for _, u in part]
    assert sorted(everyone) == sorted(users)  # each once
    done = mem(script_runner, "embed", "--all-users", "--jobs", "2", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert {k: doc[k] for k in ("users", "embedded", "pending")} == \
        {"users": 6, "embedded": 6, "pending": 0}
    assert all(embed.pending_count(open_as(u)) == 0 for u in users)


def test_embed_json_and_stats(script_runner: ScriptRunner, vault: Vault) -> None:
    remember.add(vault, FACTS[0], "fact")
    stats = json.loads(mem(script_runner, "stats", "--json").stdout)
    assert stats["vectors_pending"] == 1
    done = mem(script_runner, "embed", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert set(doc) >= {"users", "embedded", "pending", "model"}
    assert (doc["embedded"], doc["pending"]) == (1, 0)
    stats = json.loads(mem(script_runner, "stats", "--json").stdout)
    assert (stats["vectors_pending"], stats["embeddings_model"]) == (0, doc["model"])


def wait_for(check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("the background embedding did not finish")
        time.sleep(0.1)


def embedding_children(marker: Path) -> list[int]:
    """Background mem processes this test started (their argv names its tmp dir)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(str(marker).encode() in a for a in argv) and \
                    (b"embed" in argv or b"ingest" in argv):
                pids.append(int(proc.name))
    return pids


@pytest.mark.script_launch_mode("subprocess")
def test_a_hook_ingest_embeds_in_its_background_child(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    monkeypatch.setenv("MEM_LOG_DIR", str(tmp_path / "logs"))
    transcript = tmp_path / "t" / "5f0c2a8e-3b1d-4c6f-9a7e-2d8b1c4e6f00.jsonl"
    transcript.parent.mkdir()
    shutil.copy(FIXTURES / "claude-code.jsonl", transcript)
    payload = {"session_id": "5f0c2a8e-3b1d-4c6f-9a7e-2d8b1c4e6f00",
               "transcript_path": str(transcript), "hook_event_name": "SessionEnd",
               "reason": "exit"}
    env = {**os.environ, "MEM_EMBEDDINGS_BACKGROUND": "true"}
    try:
        done = subprocess.run([str(MEM), "hook", "claude-code"], input=json.dumps(payload),
                              text=True, capture_output=True, env=env, timeout=30,
                              check=False)
        assert (done.returncode, done.stdout) == (0, "")
        wait_for(lambda: not embedding_children(tmp_path))
    finally:
        for pid in embedding_children(tmp_path):
            os.kill(pid, 9)
    assert vault.state().live == {"message": 13, "summary": 1}
    assert embed.pending_count(vault) == 0
    assert store(vault).count() == 14


@pytest.mark.script_launch_mode("subprocess")
def test_mem_add_embeds_its_record_in_a_detached_child(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEM_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("MEM_EMBEDDINGS_BACKGROUND", "true")
    try:
        added = mem(script_runner, "add", FACTS[0], "--json")
        assert added.returncode == 0, added.stderr
        wait_for(lambda: embed.pending_count(vault) == 0)
        wait_for(lambda: not embedding_children(tmp_path))
    finally:
        for pid in embedding_children(tmp_path):
            os.kill(pid, 9)
    assert set(store(vault).has()) == {json.loads(added.stdout)["memory_id"]}
