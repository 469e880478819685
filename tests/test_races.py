"""Races: `destroy`, `rotate-key --now` and `forget` while other processes add, ingest,
search and run the Claude Code hook for the same user. Whatever the interleaving, no
acknowledged record is lost or doubled, nothing forgotten comes back, every envelope
opens, and verify finds nothing. The oracle (tests/crash_oracle.py) reads the result.

`make test` runs a destroy among writers once; `make test-faults` runs the rest
(marker `faults`): rotate-key and forget among writers, a forget racing re-ingests of
its transcript, and more rounds of the destroy.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from memvault.config import resolve
from memvault.ops import admin, forget, remember
from memvault.vault.vault import Vault
from tests.crash_oracle import read_user, term_counts
from tests.test_hooks import CLAUDE_SID, FIXTURES, end_payload, wait_background

MEM = str(Path(sys.executable).parent / "mem")
MASTER = bytes(range(1, 33))
ROOT = Path("default") / "alice"


@dataclass
class Run:
    args: tuple[str, ...]
    started: float
    ended: float
    code: int
    stderr: str
    stdout: str = ""


def mem_run(*args: str, stdin: bytes = b"") -> Run:
    started = time.monotonic()
    done = subprocess.run([MEM, *args], input=stdin, capture_output=True, timeout=120,
                          check=False, env={**os.environ, "MEM_LOCK_TIMEOUT": "60"})
    return Run(args, started, time.monotonic(), done.returncode, done.stderr.decode(),
               done.stdout.decode())


@pytest.fixture
def seeded(monkeypatch: pytest.MonkeyPatch, vault_dir: Path) -> dict[str, str]:
    monkeypatch.setenv("MEM_MASTER_KEY", base64.b64encode(MASTER).decode())
    admin.init(resolve())
    v = Vault(resolve())
    ids = {word: remember.add(v, f"Seed {word} fact", "fact").record.memory_id
           for word in ("heron", "walrus")}
    ids["manatee"] = remember.add(v, "Seed manatee message", "message",
                                  session="s1").record.memory_id
    return ids


def race(tmp_path: Path, op: tuple[str, ...], adds: int) -> tuple[Run, list[Run], list[Run]]:
    """Start writers, an ingest, searches and a hook; start `op` among them. Returns the
    op's run, the writers' runs (each add's text is its last argument) and the rest."""
    transcript = tmp_path / "claude" / f"{CLAUDE_SID}.jsonl"
    transcript.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "claude-code.jsonl", transcript)
    lines = "\n".join(json.dumps({"id": f"r{n}", "role": "user",
                                  "content": f"Racing otter message {n}"}) for n in range(3))
    writes: list[Run] = []
    others: list[Run] = []
    result: list[Run] = []

    def writer(w: int) -> None:
        for i in range(adds):
            writes.append(mem_run("add", f"Racing otter fact {w}x{i}"))

    def ingester() -> None:
        others.append(mem_run("ingest", "-", "--format", "jsonl", "--session", "race",
                              stdin=lines.encode()))

    def searcher() -> None:
        for _ in range(2):
            others.append(mem_run("search", "otter"))

    def hooked() -> None:
        others.append(mem_run("hook", "claude-code",
                              stdin=json.dumps(end_payload(transcript)).encode()))

    def operation() -> None:
        time.sleep(0.2)
        result.append(mem_run(*op))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    threads += [threading.Thread(target=f) for f in (ingester, searcher, hooked, operation)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    wait_background(tmp_path)
    return result[0], writes, others


def present(vault_dir: Path) -> dict[str, int]:
    """Each live record's content → how many times the oracle finds it."""
    found = read_user(vault_dir / ROOT, MASTER, "default", "alice")
    assert not found.unopened, found.unopened
    counts: dict[str, int] = {}
    for memory_id, content in found.contents.items():
        counts[content] = counts.get(content, 0) + len(found.places[memory_id])
    return counts


def verified_clean() -> None:
    done = mem_run("verify", "--json")
    assert done.code == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["problems"] == [], report


@pytest.mark.faults
@pytest.mark.parametrize("op", [
    pytest.param(("rotate-key", "--now"), id="rotate-now"),
    pytest.param(("rotate-key",), id="rotate"),
    pytest.param(("forget", "--query", "heron", "--yes"), id="forget"),
    pytest.param(("forget", "--query", "heron", "--yes", "--now"), id="forget-now"),
])
def test_rotate_and_forget_among_writers_lose_nothing_and_bring_nothing_back(
        seeded: dict[str, str], vault_dir: Path, tmp_path: Path,
        op: tuple[str, ...]) -> None:
    for round_ in range(3):
        if round_:  # the next round races again over what the last one left
            remember.add(Vault(resolve()), "Seed heron fact", "fact")
        done, writes, others = race(tmp_path / f"r{round_}", op, adds=2)
        assert done.code == 0, done.stderr
        assert all(r.code == 0 for r in [*writes, *others]), [
            (r.args, r.code, r.stderr) for r in [*writes, *others] if r.code]
        counts = present(vault_dir)
        for r in writes:  # every acknowledged add, exactly once
            assert counts.get(r.args[-1]) == 1, (r.args[-1], counts)
        assert all(n == 1 for n in counts.values()), counts
        for n in range(3):
            assert counts.get(f"Racing otter message {n}") == 1
        assert counts.get("Seed walrus fact") == 1 and counts.get("Seed manatee message") == 1
        if op[0] == "forget":
            assert "Seed heron fact" not in counts
            found = read_user(vault_dir / ROOT, MASTER, "default", "alice")
            assert not found.anywhere("heron")
            assert all(c == 0 for c in term_counts(vault_dir / ROOT, "heron",
                                                   found.deks).values())
        else:
            assert counts.get("Seed heron fact") == 1
        verified_clean()


@pytest.mark.parametrize("rounds", [pytest.param(1, id="once"),
                                    pytest.param(3, id="more", marks=pytest.mark.faults)])
def test_destroy_among_writers_leaves_a_readable_user_or_none(
        seeded: dict[str, str], vault_dir: Path, tmp_path: Path, rounds: int) -> None:
    """What was acknowledged after the destroy finished is there, once, and readable;
    what was acknowledged before it began is gone; the org log names each destroy."""
    for round_ in range(rounds):
        if not (vault_dir / ROOT).exists():
            remember.add(Vault(resolve()), "Seed heron fact", "fact")
        done, writes, others = race(tmp_path / f"r{round_}", ("destroy", "--confirm", "alice"),
                                    adds=3)
        assert done.code == 0, done.stderr
        # A write waits for the lock and then creates the user anew; a read during the
        # destroy may be told to run it again (65) or find no user (66).
        assert all(r.code == 0 for r in writes), [(r.args, r.stderr) for r in writes]
        assert all(r.code in (0, 65, 66) for r in others), [(r.args, r.stderr)
                                                            for r in others]
        counts = present(vault_dir) if (vault_dir / ROOT).exists() else {}
        assert all(n == 1 for n in counts.values()), counts
        for r in writes:
            if r.started > done.ended:
                assert counts.get(r.args[-1]) == 1, (r.args[-1], counts)
            if r.ended < done.started:
                assert r.args[-1] not in counts
        assert "Seed walrus fact" not in counts
        if counts:
            verified_clean()
        entries = [json.loads(line) for line in
                   (vault_dir / "default" / "audit.jsonl").read_text().splitlines()]
        assert [e["detail"]["user"] for e in entries if e["op"] == "user.destroy"] == \
            ["alice"] * (round_ + 1)


@pytest.mark.faults
def test_forget_racing_a_reingest_of_its_transcript_brings_nothing_back(
        seeded: dict[str, str], vault_dir: Path, tmp_path: Path) -> None:
    """The forgotten messages of a transcript are marked before any file changes: an
    ingest of the same transcript racing the forget never stores them again."""
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("\n".join(json.dumps(
        {"id": f"t{n}", "role": "user", "content": f"Transcript narwhal line {n}"})
        for n in range(4)) + "\n")
    assert mem_run("ingest", str(transcript), "--session", "tx").code == 0
    v = Vault(resolve())
    plan = forget.select(v, [], session="tx")
    assert len(plan.targets) == 4
    runs: list[Run] = []
    threads = [threading.Thread(target=lambda: runs.append(
        mem_run("ingest", str(transcript), "--session", "tx"))) for _ in range(3)]
    for t in threads:
        t.start()
    forget.forget(v, plan)
    for t in threads:
        t.join(timeout=120)
    assert all(r.code == 0 for r in runs), [r.stderr for r in runs]
    assert mem_run("ingest", str(transcript), "--session", "tx").code == 0
    found = read_user(vault_dir / ROOT, MASTER, "default", "alice")
    assert not found.anywhere("narwhal")
    verified_clean()


def test_a_writer_opened_before_a_destroy_writes_to_the_user_made_after_it(
        seeded: dict[str, str], vault_dir: Path) -> None:
    """A process that read the user's data keys, then waited while the user was destroyed
    and made again by another writer, writes under the new user's keys (not 65)."""
    early = Vault(resolve())
    remember.add(early, "Early otter fact", "fact")  # its data keys are now read
    assert admin.destroy(Vault(resolve()), "alice").destroyed
    remember.add(Vault(resolve()), "Later badger fact", "fact")  # alice anew, new keys
    remember.add(early, "Late lynx fact", "fact")
    assert present(vault_dir) == {"Later badger fact": 1, "Late lynx fact": 1}
