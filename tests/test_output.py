"""What people and pipes see: a terminal gets tables and cards fitted to its width; a
pipe gets plain lines, one record a line, never wrapped and with no box drawing. And
`stats` names each kind once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.model.records import NewMessage
from memvault.ops import compact, prefs, remember
from memvault.ops.admin import stats
from memvault.ops.ingest import add_messages
from memvault.vault.vault import Vault
from tests.conftest import mem

MEM = Path(sys.executable).parent / "mem"
BOX = re.compile("[\u2500-\u257f]")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LONG = " ".join(f"word{n:03d}" for n in range(70))  # 559 characters, one paragraph
LINES = "first line of a note\nsecond line of it"


def run_on_terminal(*args: str, columns: int) -> str:
    """Run `mem` with a pseudo-terminal of `columns` as its stdout; what it printed there."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns)}
    child = subprocess.Popen([str(MEM), *args], stdin=subprocess.DEVNULL, stdout=slave,
                             stderr=subprocess.PIPE, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert child.wait(timeout=60) == 0, child.stderr.read() if child.stderr else b""
    return ANSI.sub("", b"".join(chunks).decode().replace("\r\n", "\n"))


def run_piped(*args: str, columns: int) -> str:
    """Run the installed `mem` with its stdout a pipe."""
    result = subprocess.run([str(MEM), *args], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "COLUMNS": str(columns)}, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def notes(vault: Vault) -> dict[str, str]:
    """Three records, one 559 characters long and one of two lines; a preference key."""
    ids = {text: remember.add(vault, text, "fact").record.memory_id
           for text in ("Prefers green tea", LONG, LINES)}
    prefs.set_(vault, "editor", "vim")
    return ids


def test_a_terminal_gets_cards_and_tables_fitted_to_its_width(notes: dict[str, str]) -> None:
    listed = run_on_terminal("list", columns=40)
    lines = listed.splitlines()
    assert any(line.startswith(notes[LONG]) for line in lines)  # the card's header: its id
    # The text under it is folded to the width (the terminal wraps the header, whole).
    text = [line for line in lines if line and line.split()[0] not in notes.values()]
    assert all(len(line) <= 40 for line in text), listed
    assert sum("word0" in line for line in text) >= 5
    table = run_on_terminal("pref", "list", columns=40)
    assert BOX.search(table) and "editor" in table


def test_a_pipe_gets_one_plain_line_a_record_never_wrapped(
        script_runner: ScriptRunner, notes: dict[str, str]) -> None:
    listed = run_piped("list", columns=40).splitlines()
    assert len(listed) == 3 and not any(BOX.search(line) for line in listed)
    by_id = {line.split()[0]: line for line in listed}
    assert set(by_id) == set(notes.values())
    assert by_id[notes[LONG]].endswith(LONG)  # all 559 characters, on the one line
    assert by_id[notes[LINES]].endswith("first line of a note second line of it")
    assert by_id[notes["Prefers green tea"]].split()[1] == "fact"

    def piped(*args: str) -> str:  # in-process: stdout is captured, no terminal either
        result = mem(script_runner, *args, COLUMNS="40")
        assert result.returncode == 0, result.stderr
        return str(result.stdout)

    found = piped("search", "word042").splitlines()
    assert len(found) == 1 and found[0].startswith(notes[LONG])
    for args in (["pref", "list"], ["stats"], ["audit"], ["show", notes[LONG]],
                 ["config", "show"]):
        assert not BOX.search(piped(*args)), args
    # Tables too: a line a row (a header line first), however narrow COLUMNS says it is.
    assert [line.split()[:2] for line in piped("pref", "list").splitlines()] == \
        [["key", "value"], ["editor", "vim"]]
    assert len(piped("stats").splitlines()) == len(json.loads(piped("stats", "--json")))
    assert LONG in piped("show", notes[LONG]).splitlines()


@pytest.mark.script_launch_mode("inprocess")
def test_stats_names_each_kind_once_and_counts_a_compacted_session(
        script_runner: ScriptRunner, vault: Vault) -> None:
    for text in ("Prefers tea", "Prefers short answers"):
        remember.add(vault, text, "preference")
    add_messages(vault, "chat", [NewMessage(f"message {n} about kayaks", "user", f"m{n}")
                                 for n in range(30)])
    doc = json.loads(mem(script_runner, "stats", "--json").stdout)
    assert doc["by_type"]["preference"] == 2 and doc["pref_keys"] == 0
    assert "preferences" not in doc and doc["sessions"] == 1
    shown = mem(script_runner, "stats").stdout
    assert not re.search(r"^preferences\b", shown, re.MULTILINE)
    # In words, not Python's: yes / no, and "-" for what has no value yet.
    rows = {line.split()[0]: line.split()[1:] for line in shown.splitlines()}
    assert rows["exists"] == ["yes"] and rows["frozen"] == ["no"]
    assert not re.search(r"\b(True|False|None)\b", shown)
    first = json.loads(mem(script_runner, "list", "--json").stdout)["records"][0]
    detail = mem(script_runner, "show", first["memory_id"]).stdout
    fields = {line.split()[0]: line.split()[1:] for line in detail.splitlines()[1:-1]}
    assert fields["archived"] == ["no"] and not re.search(r"\b(True|False)\b", detail)

    job = compact.Job(vault.settings, vault.master, vault.settings.compaction, False,
                      ("chat",), show_text=False)
    compact.run_one(job, vault.org, vault.user)
    after = stats(Vault(vault.settings))
    assert after.archived > 0  # the session went to the archive, summarised
    assert after.sessions == 1
