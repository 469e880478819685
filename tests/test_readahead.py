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


# --- nothing in the scanned folder runs; nothing the helper sends is trusted -------------


def _planted_names() -> set[str]:
    """Every module the helper, or Python's own start, could import by name: the
    standard library's, the start-up hooks, and every top-level package loaded here
    (mem's own and its dependencies)."""
    import sys

    names = set(sys.stdlib_module_names) | {"sitecustomize", "usercustomize"}
    names |= {name.split(".")[0] for name in sys.modules}
    return {n for n in names if n.isidentifier()}


def _plant(folder: Path, markers: Path, where: str) -> int:
    names = _planted_names()
    for name in names:
        (folder / f"{name}.py").write_text(
            f"open({str(markers / f'{where}-{name}')!r}, 'w').close()\n")
    return len(names)


def test_no_module_in_the_scanned_folder_or_on_pythonpath_runs_in_the_helper(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted_here: list[Path],
        vault: Vault) -> None:
    tree = _tree(tmp_path / "tree")
    markers, path_dir = tmp_path / "markers", tmp_path / "pythonpath"
    markers.mkdir()
    path_dir.mkdir()
    assert _plant(tree, markers, "cwd") > 250
    _plant(path_dir, markers, "pythonpath")
    monkeypatch.chdir(tree)  # the scan runs from the folder it scans
    monkeypatch.setenv("PYTHONPATH", str(path_dir))
    ahead = _scan(vault, tree, True, monkeypatch)
    assert sorted(p.name for p in markers.iterdir()) == []
    assert counted_here == []  # the helper read every file: it ran, and was not upset
    assert ahead[1:4] == (24, 24 * 29, 24)  # everything stored, each secret withheld
    texts = " ".join(content for _, _, content, _ in _stored(vault))
    assert SECRET not in texts and "ana.lopez@example.org" not in texts
    assert "ferry tickets are booked" in texts


# Helpers that misbehave: each is started as the real one is (`python -I -c CODE ROOT`).
_REAL = readahead._BOOT
_SLEEP = "import time; time.sleep(300)"
_FRAME = "import sys; out = sys.stdout.buffer; out.write({!r}); out.flush(); "
BAD_HELPERS = {
    # stray bytes before its answers (a start-up hook that prints, say)
    "stray-bytes": _FRAME.format(b"hello from sitecustomize\n") + _REAL,
    "oversize-length": _FRAME.format(b"\xff\xff\xff\xf0") + _SLEEP,
    "truncated-frame": _FRAME.format((1000).to_bytes(4, "big") + b"[[" * 5),
    "not-json": _FRAME.format((5).to_bytes(4, "big") + b"hello") + _SLEEP,
    "wrong-shape": _FRAME.format((9).to_bytes(4, "big") + b"[1,2,3,4]") + _SLEEP,
    "index-out-of-range": _FRAME.format((21).to_bytes(4, "big") + b"[null,null,[7],[]]")
                          + _SLEEP,
    "silent": "import sys; sys.stdin.buffer.read()",
}


def _within(seconds: float, work: Any) -> Any:
    """`work()`'s result, asserting it ends (a bound on a hang, not a speed claim)."""
    import threading

    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(work()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert done, "it hangs on its helper"
    return done[0]


@pytest.mark.parametrize("code", BAD_HELPERS.values(), ids=BAD_HELPERS.keys())
def test_a_helper_that_misbehaves_is_left_and_every_file_is_read_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted_here: list[Path],
        vault: Vault, code: str) -> None:
    wanted = _wanted(sorted(_tree(tmp_path / "tree").rglob("*.json*")))
    policy = AdmissionPolicy(vault.settings)
    expected = [_comparable(readahead.read(w.path, "auto", policy if w.screen else None))
                for w in wanted]
    counted_here.clear()
    _helper_always(monkeypatch)
    monkeypatch.setattr(readahead, "_BOOT", code)
    monkeypatch.setattr(readahead, "ANSWER_WAIT", 1.0)  # the silent one: a short wait
    got = _within(120, lambda: [_comparable(f) for f in
                                readahead.reads(wanted, "auto", policy)])
    assert got == expected
    assert counted_here == [w.path for w in wanted]  # all of it read here instead


def test_a_scan_whose_helper_prints_stray_bytes_stores_everything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vault: Vault) -> None:
    tree = _tree(tmp_path / "tree")
    monkeypatch.setattr(readahead, "_BOOT", BAD_HELPERS["stray-bytes"])
    result = _within(120, lambda: _scan(vault, tree, True, monkeypatch))
    assert result[1:4] == (24, 24 * 29, 24)
    assert "ferry tickets are booked" in " ".join(c for _, _, c, _ in _stored(vault))
