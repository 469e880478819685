"""A scan that meets a large live transcript (issue 34, item 4): its bar moves while the
file is read (the file's share read and the messages stored so far, beside the count of
transcripts), and a scan stopped there, by Ctrl-C or by a kill, keeps every transcript it
finished and the whole messages of the one under way: each stored message is the one a
whole read stores, and the same scan run again stores the rest, nothing twice.

The large session is the real one of ../shared/bench-data/transcripts, copied end to end
with ids of its own (about 40 MB: several of the blocks a large file is stored in), on a
real pseudo-terminal (tests/test_progress.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from memvault.config import resolve
from memvault.ops.admin import init
from test_ingest_incremental import SESSION, real_data
from test_ingest_prefixes import stored, vault_for
from test_progress import INTERRUPTED, _with_token, on_terminal, piped, transcripts

_IDS = ("uuid", "parentUuid", "logicalParentUuid", "leafUuid", "tool_use_id")


def _renamed(value: Any, copy: int) -> Any:
    if isinstance(value, dict):
        return {k: f"{v}-{copy}" if (k in _IDS or (k == "id" and str(v).startswith(
                    ("msg_", "toolu_")))) and isinstance(v, str) else _renamed(v, copy)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, copy) for v in value]
    return value


def large_session(path: Path, size: int) -> None:
    """About `size` bytes of one Claude Code session: the real one, copied end to end,
    each copy's ids its own and its first line's parent the last copy's last line."""
    lines = [json.loads(raw) for raw in SESSION.read_bytes().splitlines() if raw.strip()]
    written, copy, last = 0, 0, None
    with path.open("w") as fh:
        while written < size:
            for line in lines:
                entry = _renamed(line, copy)
                entry["sessionId"] = "large-live-session"
                if "parentUuid" in entry and entry["parentUuid"] is None and last:
                    entry["parentUuid"] = last
                last = entry.get("uuid") if isinstance(entry.get("uuid"), str) else last
                raw = json.dumps(entry) + "\n"
                fh.write(raw)
                written += len(raw)
            copy += 1


def _folder(tmp_path: Path) -> Path:
    """A finished transcript first (compressed: a scan ingests it on its own, before the
    others), then the large session."""
    init(resolve())
    folder = tmp_path / "t"
    transcripts(folder, 1, compress=True)  # s0.jsonl.zst
    large_session(folder / "z-large.jsonl", 40 << 20)
    return folder


STORING = re.compile(rb"z-large\.jsonl: \d+% read, [\d,]+ messages? stored")


def _rest_stores_what_was_left(folder: Path, partial: set[tuple[Any, ...]]) -> None:
    """The scan run again finishes: every message once, and each one stored before the
    stop is stored as the whole read stores it (none was cut)."""
    again = piped("ingest", "--scan", str(folder), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["files_ingested"] == 1  # the large file only
    final = stored(vault_for("alice"))  # asserts no record twice
    assert partial <= final
    assert {r for r in final if str(r[2]).startswith("t0m")} == \
        {r for r in partial if str(r[2]).startswith("t0m")}
    report = piped("verify", "--json")
    assert json.loads(report.stdout)["ok"], report.stdout


@pytest.mark.long  # a 40 MB session: `make test-long` and CI
@real_data
def test_ctrl_c_within_a_large_file_of_a_scan_keeps_the_files_done_and_whole_messages(
        tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    run = on_terminal(["ingest", "--scan", str(folder)],
                      until=lambda seen: STORING.search(seen) is not None)
    assert run.returncode == 130, run.shown
    assert "Traceback" not in run.shown
    (said,) = INTERRUPTED.findall(run.terminal)
    assert said.startswith(b"1 of 2 transcripts ingested and kept"), said
    partial = stored(vault_for("alice"))
    large = {r for r in partial if r[1] == "large-live-session"}
    assert len(large) > 0  # whole messages of the file under way are kept
    _rest_stores_what_was_left(folder, partial)


@pytest.mark.long
@real_data
def test_a_scan_killed_within_a_large_file_keeps_the_files_done_and_whole_messages(
        tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    token = uuid.uuid4().hex
    killed: list[int] = []

    def kill(seen: bytes) -> bool:
        if not killed and STORING.search(seen):
            for pid in _with_token(token):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        return False

    run = on_terminal(["ingest", "--scan", str(folder)], until=kill,
                      env={"MEM_TEST_TOKEN": token})
    assert killed and run.returncode == -signal.SIGKILL, run.shown
    partial = stored(vault_for("alice"))
    assert {r for r in partial if r[1] == "large-live-session"}
    assert any(str(r[2]).startswith("t0m") for r in partial)  # the file finished first
    _rest_stores_what_was_left(folder, partial)
