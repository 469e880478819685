"""A reader that stops early (`mem list | head -1`): mem stops quietly, as git does.

Through real pipes: the output is larger than a pipe holds, so mem is still writing when
`head` goes away. mem ends by SIGPIPE (the shell's 141, not 1, the code of a bug), says
nothing on stderr ("Exception ignored ... BrokenPipeError" included), leaves the vault as
it was, and a hook still exits 0. With PYTHONUNBUFFERED too, where a write the pipe takes
only in part used to be dropped silently (exit 0, output cut).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.vault.vault import Vault
from tests.conftest import mem

MEM = Path(sys.executable).parent / "mem"
BASH = shutil.which("bash")
SIGPIPE_STATUS = 128 + signal.SIGPIPE  # what a shell reports for `git log | head -1`


@pytest.fixture
def full_vault(script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> Vault:
    """About a megabyte of memory: far more than a pipe holds."""
    transcript = tmp_path / "talk.jsonl"
    with transcript.open("w") as fh:
        for n in range(250):
            fh.write(json.dumps({"id": f"m{n}", "role": "user",
                                 "content": f"Harbour note {n}: " + "lighthouse keeper " * 220})
                     + "\n")
    done = mem(script_runner, "ingest", str(transcript), "--format", "jsonl",
               "--session", "talk", "--json")
    assert json.loads(done.stdout)["messages_added"] == 250
    return vault


def piped(command: str, unbuffered: bool) -> subprocess.CompletedProcess[bytes]:
    """`command` run by bash under pipefail, as a script would."""
    assert BASH is not None
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run([BASH, "-c", f"set -o pipefail; {command}"], env=env,
                          capture_output=True, timeout=120)


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize(("command", "head"), [
    ("list -n 250", "head -1"),
    ("export", "head -c 100"),
    ("export --format markdown", "head -c 100"),
    ("search harbour -n 100 --json", "head -c 10"),
    ("list -n 250 --json", "head -c 10"),
])
def test_a_reader_gone_ends_mem_quietly_as_git(
        full_vault: Vault, unbuffered: bool, command: str, head: str) -> None:
    done = piped(f"{MEM} {command} | {head}", unbuffered)
    assert done.returncode == SIGPIPE_STATUS, done.stderr
    assert done.stderr == b""  # no error line, no "Exception ignored", no traceback
    assert done.stdout  # what head took
    # Nothing changed: the vault verifies, and the whole output is still all there.
    whole = piped(f"{MEM} {command} | wc -c", unbuffered)
    assert whole.returncode == 0 and int(whole.stdout) > 300_000
    assert piped(f"{MEM} verify --json", unbuffered).returncode == 0


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_an_export_to_a_pipe_by_name_ends_the_same_way(full_vault: Vault,
                                                       tmp_path: Path) -> None:
    here = tmp_path / "here"
    here.mkdir()
    done = piped(f"cd {here} && {MEM} export -o /dev/stdout | head -c 100", False)
    assert done.returncode == SIGPIPE_STATUS and done.stderr == b""
    assert list(here.iterdir()) == []  # no export, whole or partial, left beside it


def test_a_program_reading_part_sees_a_death_by_sigpipe(full_vault: Vault) -> None:
    proc = subprocess.Popen([str(MEM), "export"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10) == b'{\n  "expor'
    proc.stdout.close()
    assert proc.wait(timeout=60) == -signal.SIGPIPE
    assert proc.stderr.read() == b""


def test_a_hook_whose_reader_is_gone_still_exits_0(full_vault: Vault) -> None:
    from memvault.ops import remember

    remember.add(full_vault, "Prefers short answers", "preference")
    payload = json.dumps({"hook_event_name": "SessionStart", "session_id": "s1",
                          "cwd": "/"}).encode()
    proc = subprocess.Popen([str(MEM), "hook", "claude-code"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()  # the agent went away before the brief was printed
    _, stderr = proc.communicate(payload, timeout=60)
    assert proc.returncode == 0 and stderr == b""
