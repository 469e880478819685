"""Faults a vault must survive: a busy lock, a full disk, a process killed in the middle of a write.

Kills run in a child process (python -c) whose os.replace / os.write is patched to SIGKILL
itself at the worst moment; the parent then checks what a user would see afterwards.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import open_as
from memvault.errors import EX_TEMPFAIL, StorageError
from memvault.model.records import Filters
from memvault.ops import prefs, recall, remember, verify
from memvault.storage import fsio
from memvault.vault.vault import Vault

MEM = str(Path(sys.executable).parent / "mem")
USER_DIR = Path("default") / "alice"
ENOSPC_TEXT = os.strerror(errno.ENOSPC)



def vault_problems(report: dict) -> list[dict]:
    """Problems other than a stale-index mark: a failed write may leave the index marked
    for a rebuild (it is derived data), never the vault changed."""
    return [p for p in report["problems"]
            if not (p["file"].endswith("/index") and p["severity"] == "warning")]

def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def contents(v: Vault) -> list[str]:
    return sorted(r.content
                  for r in recall.list_records(open_as("alice"), Filters(limit=1000)).records)


def user_files(vault_dir: Path) -> dict[str, bytes]:
    root = vault_dir / USER_DIR
    # Reads note themselves in the audit log and reads.json; the index is derived and
    # rebuildable: all three left out.
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and p.name not in ("audit.jsonl", "reads.json")
            and p.relative_to(root).parts[0] != "index"}


def temp_files(vault_dir: Path) -> list[Path]:
    return [p for p in vault_dir.rglob(fsio.TMP_PREFIX + "*")]


def run_child(script: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ), check=False)


@pytest.fixture
def seeded(vault: Vault) -> Vault:
    remember.add(vault, "Committed fact one", "fact")
    remember.add(vault, "Committed fact two", "fact")
    remember.add(vault, "First message", "message", session="s1")
    remember.add(vault, "Second message", "message", session="s1", role="assistant")
    return vault


SEEDED = sorted(["Committed fact one", "Committed fact two", "First message", "Second message"])


# --- a concurrent writer holds the lock ---------------------------------------------------------


@pytest.mark.script_launch_mode("subprocess")
def test_busy_lock_exits_75_then_waits_for_release(seeded, vault_dir, script_runner):
    lock_path = seeded.layout.lock_path  # <vault>/<org>/.locks/<user>.lock
    assert lock_path == vault_dir / "default" / ".locks" / "alice.lock"
    assert lock_path.exists()
    fd = os.open(lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        started = time.monotonic()
        busy = script_runner.run(["mem", "add", "written while locked"],
                                 env=env_with(MEM_LOCK_TIMEOUT="0.5"), timeout=30)
        assert busy.returncode == EX_TEMPFAIL, busy.stderr
        assert time.monotonic() - started >= 0.5
        lines = busy.stderr.splitlines()
        assert len(lines) == 1 and "locked" in lines[0] and "retry" in lines[0]
        assert busy.stdout == ""
        assert contents(seeded) == SEEDED  # nothing was added

        releaser = threading.Timer(0.3, fcntl.flock, (fd, fcntl.LOCK_UN))
        started = time.monotonic()
        releaser.start()
        try:
            waited = script_runner.run(["mem", "add", "written after release", "--json"],
                                       env=env_with(MEM_LOCK_TIMEOUT="5"), timeout=30)
        finally:
            releaser.join()
        assert waited.returncode == 0, waited.stderr
        assert time.monotonic() - started >= 0.3  # it really waited for the holder
        assert json.loads(waited.stdout)["deduplicated"] is False
    finally:
        os.close(fd)
    assert contents(seeded) == sorted([*SEEDED, "written after release"])


def test_busy_lock_in_the_library_raises_busy_and_changes_nothing(seeded, vault_dir, monkeypatch):
    from memvault.errors import Busy

    monkeypatch.setenv("MEM_LOCK_TIMEOUT", "0.2")
    before = user_files(vault_dir)
    fd = os.open(seeded.layout.lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        v = open_as("alice")
        for call in (lambda: remember.add(v, "x", "fact"), lambda: prefs.set_(v, "k", "v"),
                     lambda: remember.add(v, "y", "message", session="s1")):
            with pytest.raises(Busy) as err:
                call()
            assert err.value.exit_code == EX_TEMPFAIL
    finally:
        os.close(fd)
    assert user_files(vault_dir) == before


# --- a full disk -----------------------------------------------------------------------------


def enospc(*_args: object) -> int:
    raise OSError(errno.ENOSPC, ENOSPC_TEXT)


def half_then_enospc():  # noqa: ANN201 - a fake os.write
    """A fake os.write: the first call writes half its buffer, every later call fails ENOSPC."""
    real_write = os.write
    calls = []

    def write(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: max(1, len(data) // 2)]))
        raise OSError(errno.ENOSPC, ENOSPC_TEXT)

    return write


@pytest.mark.parametrize("fault", ["write", "partial-write", "fsync"])
@pytest.mark.parametrize("target", ["CLAUDE.md", "preferences.json", "sessions/s1.jsonl"])
def test_full_disk_changes_nothing(seeded, vault_dir, monkeypatch, fault, target):
    before = user_files(vault_dir)
    v = open_as("alice")
    v.store.record_key(v.state().key_version)  # warm the key cache outside the fault
    action = {
        "CLAUDE.md": lambda: remember.add(v, "A fact that did not fit", "fact"),
        "preferences.json": lambda: prefs.set_(v, "editor", "a value that did not fit"),
        "sessions/s1.jsonl": lambda: remember.add(v, "A message that did not fit",
                                                  "message", session="s1"),
    }[target]
    with monkeypatch.context() as m:
        if fault == "write":
            m.setattr(fsio.os, "write", enospc)
        elif fault == "partial-write":
            m.setattr(fsio.os, "write", half_then_enospc())
        else:
            m.setattr(fsio.os, "fsync", enospc)
        with pytest.raises(StorageError) as err:
            action()
    message = err.value.message
    assert ENOSPC_TEXT in message and "nothing was changed" in message
    assert target in message
    assert user_files(vault_dir) == before  # byte for byte: no partial line, no new file
    assert temp_files(vault_dir) == []
    assert contents(v) == SEEDED
    report = verify.verify(open_as("alice")).to_dict()
    assert report["ok"] and vault_problems(report) == [], report
    # Space is back: the same write now succeeds.
    action()
    assert len(contents(v)) == len(SEEDED) + (0 if target == "preferences.json" else 1)


CHILD_ENOSPC = """
import errno, os, sys
import memvault.storage.fsio as fsio
def write(fd, data):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
fsio.os.write = write
from memvault.cli import main
sys.argv = ["mem", *sys.argv[1:]]
main()
"""


def test_full_disk_through_the_cli_is_one_line_exit_74(seeded, vault_dir):
    before = user_files(vault_dir)
    result = run_child(CHILD_ENOSPC, "add", "zanzibarnospace fact")
    assert result.returncode == 74, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert ENOSPC_TEXT in lines[0] and "CLAUDE.md" in lines[0]
    assert "zanzibarnospace" not in result.stderr + result.stdout
    assert result.stdout == ""
    assert user_files(vault_dir) == before and temp_files(vault_dir) == []


# --- killed in the middle of a write ----------------------------------------------------------

CHILD_KILL_BEFORE_RENAME = """
import os, signal, sys
import memvault.storage.fsio as fsio
target = sys.argv[1]
real_replace = os.replace
def replace(src, dst, *args, **kwargs):
    if str(dst).endswith(target):
        os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(src, dst, *args, **kwargs)
fsio.os.replace = replace
from memvault.cli import main
sys.argv = ["mem", *sys.argv[2:]]
main()
"""


@pytest.mark.parametrize("target, args, expected_new", [
    ("CLAUDE.md", ["add", "Fact lost in the crash"], "Fact lost in the crash"),
    ("preferences.json", ["add", "Pref lost in the crash", "--type", "preference"],
     "Pref lost in the crash"),
])
def test_kill_before_rename_keeps_the_old_state(seeded, vault_dir, target, args, expected_new):
    before = user_files(vault_dir)
    result = run_child(CHILD_KILL_BEFORE_RENAME, target, *args)
    assert result.returncode == -signal.SIGKILL, result.stderr
    leftovers = temp_files(vault_dir)
    assert len(leftovers) == 1 and leftovers[0].parent == vault_dir / USER_DIR
    # The old state, exactly: the rename never happened.
    assert user_files(vault_dir) == {**before, str(leftovers[0].relative_to(
        vault_dir / USER_DIR)): leftovers[0].read_bytes()}
    assert contents(seeded) == SEEDED
    report = verify.verify(open_as("alice")).to_dict()
    assert report["ok"], report
    assert [p["severity"] for p in vault_problems(report)] == ["warning"]
    assert "interrupted" in vault_problems(report)[0]["problem"]
    # The next write succeeds and sweeps the temp file away.
    remember.add(open_as("alice"), "Written after the crash", "fact")
    assert temp_files(vault_dir) == []
    assert contents(seeded) == sorted([*SEEDED, "Written after the crash"])
    assert expected_new not in contents(seeded)
    report = verify.verify(open_as("alice")).to_dict()
    assert report["ok"] and vault_problems(report) == [], report


CHILD_KILL_MID_APPEND = """
import os, signal, sys
import memvault.storage.fsio as fsio
target = os.path.realpath(sys.argv[1])
real_write = os.write
def write(fd, data):
    if os.path.exists(target) and os.path.samestat(os.fstat(fd), os.stat(target)):
        real_write(fd, bytes(data[: len(data) // 2]))
        os.kill(os.getpid(), signal.SIGKILL)
    return real_write(fd, data)
fsio.os.write = write
from memvault.cli import main
sys.argv = ["mem", *sys.argv[2:]]
main()
"""


def test_kill_mid_append_leaves_a_torn_tail_that_is_skipped_then_repaired(seeded, vault_dir):
    path = vault_dir / USER_DIR / "sessions" / "s1.jsonl"
    committed = path.read_bytes()
    result = run_child(CHILD_KILL_MID_APPEND, str(path),
                       "add", "Half written message", "--type", "message", "--session", "s1")
    assert result.returncode == -signal.SIGKILL, result.stderr
    torn = path.read_bytes()
    assert torn.startswith(committed) and len(torn) > len(committed)
    assert not torn.endswith(b"\n")
    # Readers skip the torn tail; verify reports it as a warning and stays ok.
    assert contents(seeded) == SEEDED
    report = verify.verify(open_as("alice")).to_dict()
    assert report["ok"], report
    problems = [p for p in report["problems"] if p["file"] == "default/alice/sessions/s1.jsonl"]
    assert len(problems) == 1 and problems[0]["severity"] == "warning"
    assert problems[0]["line"] == 3 and "torn" in problems[0]["problem"]
    # The next append must not glue its line onto the torn bytes.
    remember.add(open_as("alice"), "Message after the crash", "message", session="s1")
    assert contents(seeded) == sorted([*SEEDED, "Message after the crash"])
    data = path.read_bytes()
    assert data.startswith(committed) and data.endswith(b"\n") and data.count(b"\n") == 3
    report = verify.verify(open_as("alice")).to_dict()
    assert report["ok"] and vault_problems(report) == [], report
    # And a new session message through the CLI still reads back.
    again = subprocess.run([MEM, "list", "--session", "s1", "--json"], capture_output=True,
                           text=True, timeout=30, check=False)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["count"] == 3


def test_kill_mid_append_of_the_first_line_of_a_new_session(seeded, vault_dir):
    path = vault_dir / USER_DIR / "sessions" / "s2.jsonl"
    path.touch(mode=0o600)  # the child's target must exist to be recognised
    result = run_child(CHILD_KILL_MID_APPEND, str(path),
                       "add", "Lost first line", "--type", "message", "--session", "s2")
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert path.read_bytes() and b"\n" not in path.read_bytes()
    assert contents(seeded) == SEEDED
    remember.add(open_as("alice"), "Kept first line", "message", session="s2")
    assert contents(seeded) == sorted([*SEEDED, "Kept first line"])
    assert verify.verify(open_as("alice")).to_dict()["problems"] == []


def test_kill_mid_audit_append_does_not_break_the_chain_for_good(seeded, vault_dir):
    """An audit append is killed (a hook timed out): the chain must go on from the last entry."""
    audit = vault_dir / USER_DIR / "audit.jsonl"
    entries_before = audit.read_bytes().count(b"\n")
    result = run_child(CHILD_KILL_MID_APPEND, str(audit), "add", "Fact whose audit was torn")
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert not audit.read_bytes().endswith(b"\n")
    # The fact itself was committed before its audit entry was cut short.
    assert "Fact whose audit was torn" in contents(seeded)
    remember.add(open_as("alice"), "Fact after the torn audit entry", "fact")
    check = open_as("alice").audit.check()
    assert check.ok, check.problems
    # Chained on from the last complete entry: the read audited by contents() and the add.
    assert [e["seq"] for e in check.entries] == list(range(1, entries_before + 3))
    assert verify.verify(open_as("alice")).to_dict()["ok"]


@pytest.mark.slow
@pytest.mark.long  # a fault run: `make test-long` and CI
def test_many_writers_at_once_lose_nothing(seeded, vault_dir):
    """Several `mem add` processes racing for the same user: every record lands, once."""
    procs = [subprocess.Popen([MEM, "add", f"racing fact {i}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=env_with(MEM_LOCK_TIMEOUT="20"))
             for i in range(4)]
    procs += [subprocess.Popen([MEM, "add", f"racing message {i}", "--type", "message",
                                "--session", "s1"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=env_with(MEM_LOCK_TIMEOUT="20"))
              for i in range(4)]
    for proc in procs:
        assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
    expected = [*SEEDED, *(f"racing fact {i}" for i in range(4)),
                *(f"racing message {i}" for i in range(4))]
    assert contents(seeded) == sorted(expected)
    report = verify.verify(open_as("alice")).to_dict()
    assert report["ok"] and vault_problems(report) == [], report
