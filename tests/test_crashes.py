"""Crash enumeration (tests/crash_harness.py): every mutating command killed at the n-th
call of each file-changing system call, then checked by an independent oracle, verify,
a re-run, and the oracle again.

`make test` runs a sample: one kill point per command, each in a different place. The
whole enumeration (every n of every system call of every command) is marked `faults`
and run by `make test-faults`; with FAULTS_LOG set, each kill point's outcome is
appended there as a JSON line (`python -m tests.crash_harness LOG` sums them up).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from tests.conftest import mem
from tests.crash_harness import (
    BY_NAME,
    COMMANDS,
    INSTALL_STRACE,
    STRACE,
    SYSCALLS,
    Mem,
    Template,
    build_template,
    check_kill_point,
    check_pool_kill_point,
    env_for,
)

pytestmark = pytest.mark.skipif(not Path(STRACE).is_file(), reason=INSTALL_STRACE)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    root = tmp_path_factory.mktemp("template")
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("MEM_"):
                patch.delenv(name)
        patch.setenv("HOME", str(root))
        patch.setenv("MEM_CONFIG_DIR", str(root / "config"))
        for name, value in env_for(root / "vault", {}).items():
            patch.setenv(name, value)
        return build_template(root)


@pytest.fixture
def run_mem(script_runner: ScriptRunner) -> Mem:
    """`mem` in-process, against the vault a kill point left."""
    def run(*args: str, stdin: str = "", MEM_VAULT: str) -> Any:  # noqa: N803
        return mem(script_runner, *args, stdin=stdin, **env_for(Path(MEM_VAULT), {}))
    return run


# A few commands, each killed somewhere else: in the middle of a file's write, at a sync,
# at the rename that replaces a file, at a key's unlink, in the middle of a destroy, in a
# compaction step whose summariser proposed facts. (Each n is within that command's own
# count of that call.)
SAMPLE = [
    ("ingest", "write", 2), ("forget-id", "rename", 2), ("forget-now", "rename", 5),
    ("rotate-key-now", "unlink", 1), ("import", "fdatasync", 3), ("destroy", "unlinkat", 3),
    ("compact-facts", "fsync", 5), ("sync", "rename", 3),
]


@pytest.mark.parametrize(("name", "syscall", "n"), SAMPLE,
                         ids=[f"{c}-{s}-{n}" for c, s, n in SAMPLE])
def test_a_command_killed_at_a_sample_point_loses_and_leaks_nothing(
        template: Template, tmp_path: Path, run_mem: Mem, name: str, syscall: str,
        n: int) -> None:
    outcome = check_kill_point(template, BY_NAME[name], syscall, n, tmp_path / "run",
                               run_mem)
    assert outcome.killed, f"{name} makes fewer than {n} {syscall} calls: pick another"


@pytest.mark.faults
@pytest.mark.parametrize("syscall", SYSCALLS)
@pytest.mark.parametrize("name", [c.name for c in COMMANDS])
def test_every_kill_point_of_every_command(template: Template, tmp_path: Path,
                                           run_mem: Mem, name: str, syscall: str) -> None:
    """Kill at the 1st, 2nd, ... call until the command runs to its end untouched."""
    log = os.environ.get("FAULTS_LOG")  # not MEM_*: the sealed environment drops those

    def note(entry: dict[str, Any]) -> None:
        if log:
            with open(log, "a") as out:
                out.write(json.dumps(entry) + "\n")

    n = 1
    while True:
        try:
            outcome = check_kill_point(template, BY_NAME[name], syscall, n,
                                       tmp_path / "run", run_mem)
        except AssertionError as exc:
            note({"command": name, "syscall": syscall, "n": n, "failed": str(exc)[:2000]})
            raise
        note(outcome.to_dict())
        if not outcome.killed:
            break
        n += 1
        assert n < 2000, "runaway enumeration"


# Ctrl-C (SIGINT, delivered by strace at the n-th call) in the middle of a command: one
# line, exit 130, no traceback, and a vault a kill would leave, or better. A sample in
# `make test`; every point of the calls that write, sync and replace in `make test-faults`.
INT_SAMPLE = [("ingest", "fsync", 2), ("import", "rename", 2), ("rotate-key-now", "rename", 4),
              ("compact-facts", "fsync", 4)]
INT_SYSCALLS = ("write", "fsync", "rename", "unlink")


@pytest.mark.parametrize(("name", "syscall", "n"), INT_SAMPLE,
                         ids=[f"{c}-{s}-{n}" for c, s, n in INT_SAMPLE])
def test_a_command_interrupted_at_a_sample_point_says_so_and_loses_nothing(
        template: Template, tmp_path: Path, run_mem: Mem, name: str, syscall: str,
        n: int) -> None:
    outcome = check_kill_point(template, BY_NAME[name], syscall, n, tmp_path / "run",
                               run_mem, signal="INT")
    assert outcome.killed, f"{name} makes fewer than {n} {syscall} calls: pick another"


@pytest.mark.faults
@pytest.mark.parametrize("syscall", INT_SYSCALLS)
@pytest.mark.parametrize("name", [c.name for c in COMMANDS])
def test_every_interruption_point_of_every_command(template: Template, tmp_path: Path,
                                                   run_mem: Mem, name: str,
                                                   syscall: str) -> None:
    log = os.environ.get("FAULTS_LOG")
    n = 1
    while True:
        try:
            outcome = check_kill_point(template, BY_NAME[name], syscall, n,
                                       tmp_path / "run", run_mem, signal="INT")
        except AssertionError as exc:
            if log:
                with open(log, "a") as out:
                    out.write(json.dumps({"command": f"{name} (Ctrl-C)", "syscall": syscall,
                                          "n": n, "failed": str(exc)[:2000]}) + "\n")
            raise
        if log:
            with open(log, "a") as out:
                out.write(json.dumps({**outcome.to_dict(),
                                      "command": f"{name} (Ctrl-C)"}) + "\n")
        if not outcome.killed:
            break
        n += 1
        assert n < 2000, "runaway enumeration"


# The pool of `compact --all-users --jobs 2` killed (its parent only) after the n-th
# file-changing call of its workers: once in `make test`, every n in `make test-faults`.
POOL_SAMPLE = 3


def test_a_compaction_pool_killed_leaves_no_worker_and_loses_nothing(
        template: Template, tmp_path: Path, run_mem: Mem) -> None:
    outcome = check_pool_kill_point(template, POOL_SAMPLE, tmp_path / "run", run_mem)
    assert outcome.killed, f"the pool makes fewer than {POOL_SAMPLE} calls: pick another"


@pytest.mark.faults
def test_every_kill_point_of_a_compaction_pool(template: Template, tmp_path: Path,
                                               run_mem: Mem) -> None:
    log = os.environ.get("FAULTS_LOG")
    n = 1
    while True:
        outcome = check_pool_kill_point(template, n, tmp_path / "run", run_mem)
        if log:
            with open(log, "a") as out:
                out.write(json.dumps(outcome.to_dict()) + "\n")
        if not outcome.killed:
            break
        n += 1
        assert n < 2000, "runaway enumeration"
