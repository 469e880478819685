"""A large scan reads, parses and screens transcripts ahead in a helper process: what it
stores is exactly what a scan that reads everything itself stores, and a helper that
dies half-way loses nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memvault.config import resolve
from memvault.ops import ingest, readahead
from memvault.ops.admission import AdmissionPolicy
from memvault.ops.readahead import Fetched, Wanted
from memvault.vault.vault import Vault

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
REAL = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "transcripts"
SECRET = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"  # a GitHub token: withheld


def _line(i: int, content: str, **extra: Any) -> str:
    return json.dumps({"id": f"m{i}", "role": "user" if i % 2 else "assistant",
                       "content": content, "timestamp": f"2026-03-01T10:00:{i % 60:02d}Z",
                       **extra}) + "\n"


def _tree(root: Path) -> Path:
    """Sessions as a scan finds them, with what screening acts on: a secret (withheld),
    personal data (masked), a named speaker; and files that are not transcripts."""
    for f in range(24):
        folder = root / f"project-{f % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = [_line(i, f"session {f} turn {i}: the harbour ferry leaves at {i} past")
                 for i in range(30)]
        lines[3] = _line(3, f"my key is {SECRET}")
        lines[5] = _line(5, "write to ana.lopez@example.org about the ferry")
        lines[9] = _line(9, "ferry tickets are booked", name="Ana")
        (folder / f"session-{f:02d}.jsonl").write_text("".join(lines))
    (root / "project-0" / "settings.json").write_text('{"theme": "dark"}')
    (root / "project-1" / "broken.jsonl").write_text('{"role": "user", "content": \n')
    return root


def _wanted(paths: list[Path]) -> list[Wanted]:
    return [Wanted(p, p.stat().st_size if p.exists() else 0, screen=n % 4 != 3)
            for n, p in enumerate(paths)]


def _comparable(got: Fetched) -> tuple[Any, ...]:
    error = (type(got.error).__name__, got.error.message) if got.error else None
    return got.transcript, error, got.clean, got.found


@pytest.fixture
def counted_here(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files read in this process (the helper reads in its own)."""
    here: list[Path] = []
    real_read = readahead.read

    def read(path: Path, fmt: str, policy: AdmissionPolicy | None) -> Fetched:
        here.append(path)
        return real_read(path, fmt, policy)

    monkeypatch.setattr(readahead, "read", read)
    return here


def _paths(tmp_path: Path) -> list[Path]:
    paths = sorted(_tree(tmp_path / "tree").rglob("*.json*"))
    paths += sorted(FIXTURES.glob("*.json*"))
    if REAL.is_dir():
        paths += sorted(REAL.rglob("*.json*"))
    return [*paths, tmp_path / "gone.jsonl"]


def _read_here(tmp_path: Path, vault: Vault
               ) -> tuple[list[Wanted], AdmissionPolicy, list[tuple[Any, ...]]]:
    """The files, the policy, and what reading each in this process gives."""
    wanted = _wanted(_paths(tmp_path))
    policy = AdmissionPolicy(vault.settings)
    return wanted, policy, [
        _comparable(readahead.read(w.path, "auto", policy if w.screen else None))
        for w in wanted]


def _helper_always(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readahead, "HELPER_FROM_BYTES", 0)
    monkeypatch.setattr(readahead, "HELPER_FROM_FILES", 0)


def test_the_helper_reads_screens_and_reports_as_the_scan_itself_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted_here: list[Path],
        vault: Vault) -> None:
    wanted, policy, expected = _read_here(tmp_path, vault)
    assert any(e[3] for e in expected) and any(e[1] for e in expected)  # found, failed
    counted_here.clear()
    _helper_always(monkeypatch)
    monkeypatch.setattr(readahead, "AHEAD_FILES", 5)  # asked ahead, a few at a time
    got = [_comparable(f) for f in readahead.reads(wanted, "auto", policy)]
    assert counted_here == []  # all of it read by the helper
    assert got == expected


def test_a_helper_that_dies_leaves_the_rest_to_be_read_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted_here: list[Path],
        vault: Vault) -> None:
    wanted, policy, expected = _read_here(tmp_path, vault)
    counted_here.clear()
    _helper_always(monkeypatch)
    monkeypatch.setattr(readahead, "AHEAD_FILES", 1)  # so it has answered one file only
    real_answer = readahead._Helper.answer

    def answer(self: Any) -> Fetched:
        got = real_answer(self)
        self.proc.kill()  # killed (out of memory, say) after its first answer
        self.proc.wait()
        return got

    monkeypatch.setattr(readahead._Helper, "answer", answer)
    got = [_comparable(f) for f in readahead.reads(wanted, "auto", policy)]
    assert got == expected
    assert counted_here == [w.path for w in wanted[1:]]


def _stored(vault: Vault) -> set[tuple[str, str | None, str, str | None]]:
    return {(relpath, r.message_id, r.content, r.name)
            for relpath, records, _ in vault.store.files() for r in records}


def _scan(vault: Vault, tree: Path, helper: bool,
          monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    with monkeypatch.context() as m:
        m.setattr(readahead, "HELPER_FROM_BYTES", 0 if helper else 1 << 40)
        m.setattr(readahead, "HELPER_FROM_FILES", 0)
        result = ingest.scan_dir(vault, tree)
    return (result.files_scanned, result.files_ingested, result.messages_added,
            result.withheld, result.errors, result.passed)


def test_a_scan_read_ahead_stores_what_a_scan_read_here_stores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted_here: list[Path],
        vault: Vault) -> None:
    tree = _tree(tmp_path / "tree")
    bob = Vault(resolve(user="bob"))
    here = _scan(bob, tree, False, monkeypatch)
    read_here = len(counted_here)
    counted_here.clear()
    ahead = _scan(vault, tree, True, monkeypatch)
    assert read_here > 0 and counted_here == []
    assert ahead == here
    assert here[1:4] == (24, 24 * 29, 24)  # each session's secret withheld
    stored = _stored(vault)
    assert stored == _stored(bob)
    texts = " ".join(content for _, _, content, _ in stored)
    assert SECRET not in texts and "ana.lopez@example.org" not in texts
    assert "ferry tickets are booked" in texts


def test_the_helper_is_started_without_the_key_or_any_mem_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vault: Vault) -> None:
    monkeypatch.setenv("MEM_MASTER_KEY", "a-key-the-helper-must-not-see")
    started: list[dict[str, str]] = []
    real_popen = readahead.subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> Any:
        started.append(kwargs["env"])
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(readahead.subprocess, "Popen", popen)
    _helper_always(monkeypatch)
    wanted = _wanted(sorted(_tree(tmp_path / "tree").rglob("*.jsonl")))
    got = list(readahead.reads(wanted, "auto", AdmissionPolicy(vault.settings)))
    assert sum(f.transcript is not None for f in got) == 24  # and broken.jsonl failed
    assert len(started) == 1 and "PATH" in started[0]
    assert not [k for k in started[0] if k.startswith("MEM_")]
