"""A live Claude Code transcript is read on from where the last ingest stopped (issue 34,
item 4): hooks ingest it at every compaction and at its end, and a session of hundreds of
MB must not be parsed again whole each time. Ingested in random prefixes (cut at line
boundaries, mid-session, torn lines included), it stores exactly what one ingest of the
whole file stores; a re-ingest reads only the appended bytes; a file rewritten, truncated
or replaced is read again whole. The position is sealed in the user's state, no path and
no content in clear.

The real sessions are ../shared/bench-data/transcripts, read in place."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest_console_scripts import ScriptRunner

from memvault.ops.ingest import LIVE_MIN, ingest_file
from memvault.vault.vault import Vault
from test_ingest_prefixes import stored, vault_for

DATA = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "transcripts"
CLAUDE = DATA / "claude-code"
SESSION = CLAUDE / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"  # 2.7 MB, with subagents
RESUMED = CLAUDE / "vibe-claude-code-1.0.95.jsonl"  # 400 KB, a resumed session

real_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"no benchmark data in {DATA}")


def line_ends(data: bytes) -> list[int]:
    return [i + 1 for i, b in enumerate(data) if b == ord("\n")]


def whole(source: Path, user: str) -> set[tuple[Any, ...]]:
    v = vault_for(user)
    ingest_file(v, source)
    return stored(v)


class Reads:
    """Counts the bytes the ingest reads of one file (the real read, watched)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
        self.bytes = 0
        from memvault.storage import fsio  # imported where used: watched at its source

        opened = fsio.open_regular
        reads = self

        class Watched:
            def __init__(self, fh: Any) -> None:
                self._fh = fh

            def read(self, n: int = -1) -> bytes:
                data: bytes = self._fh.read(n)
                reads.bytes += len(data)
                return data

            def __getattr__(self, name: str) -> Any:
                return getattr(self._fh, name)

            def __enter__(self) -> Watched:
                return self

            def __exit__(self, *exc: object) -> None:
                self._fh.close()

        def watch(p: Path, what: str | None = None) -> Any:
            fh = opened(p, what)
            return Watched(fh) if Path(p) == path else fh

        monkeypatch.setattr(fsio, "open_regular", watch)


def live(tmp_path: Path, source: Path) -> Path:
    """A copy of the session at the same name, without its subagents (the session's own
    lines are what is read on; subagent files are read whole, as before)."""
    path = tmp_path / "live" / source.name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@real_data
@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_transcript_ingested_in_random_prefixes_stores_what_one_ingest_stores(
        vault: Vault, tmp_path: Path, data: st.DataObject) -> None:
    source = data.draw(st.sampled_from([SESSION, RESUMED]))
    raw = source.read_bytes()
    ends = [e for e in line_ends(raw) if e >= LIVE_MIN]
    cuts = sorted(set(data.draw(st.lists(st.sampled_from(ends), min_size=1, max_size=4))))
    torn = data.draw(st.booleans())  # a line being written when the hook ran
    user = f"u{os.urandom(4).hex()}"
    path = live(tmp_path / user, source)
    v = vault_for(user)
    for cut in cuts:
        path.write_bytes(raw[:cut + (30 if torn and cut + 30 < len(raw) else 0)])
        ingest_file(v, path)
    path.write_bytes(raw)
    ingest_file(v, path)
    assert stored(v) == whole(source, f"{user}w") - _subagents(source, f"{user}w")


def _subagents(source: Path, user: str) -> set[tuple[Any, ...]]:
    """What the session's subagent files add (the copies are made without them)."""
    return {r for r in stored(vault_for(user)) if r[4] and str(r[4]).startswith("subagent")} \
        if source.with_suffix("").is_dir() else set()


@real_data
def test_an_unchanged_transcript_is_not_read_again(vault: Vault, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = live(tmp_path, SESSION)
    shutil.copyfile(SESSION, path)
    v = vault_for("unchanged")
    first = ingest_file(v, path)
    reads = Reads(monkeypatch, path)
    again = ingest_file(v, path)
    assert again.messages_added == 0
    assert again.messages_skipped == first.messages_added  # what it holds, stored already
    assert reads.bytes < 200_000  # its start and the lines read again, not 2.7 MB


@real_data
def test_a_grown_transcript_is_read_from_where_it_was_read_to(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = SESSION.read_bytes()
    ends = line_ends(raw)
    cut = ends[len(ends) * 9 // 10]
    path = live(tmp_path, SESSION)
    path.write_bytes(raw[:cut])
    v = vault_for("grown")
    ingest_file(v, path)
    path.write_bytes(raw)  # the same file (inode) grown
    reads = Reads(monkeypatch, path)
    grown = ingest_file(v, path)
    assert grown.messages_added > 0
    assert reads.bytes < (len(raw) - cut) + 200_000
    assert stored(v) == whole(SESSION, "grown-whole") - _subagents(SESSION, "grown-whole")


@real_data
@pytest.mark.parametrize("change", ["rewritten", "truncated", "replaced", "edited head"])
def test_a_file_changed_other_than_by_appending_is_read_again_whole(
        vault: Vault, tmp_path: Path, change: str) -> None:
    """What was read before no longer holds: the file is read whole (its new lines stored
    as a whole read finds them), never read on from an offset into other bytes."""
    raw = SESSION.read_bytes()
    other = RESUMED.read_bytes()
    path = live(tmp_path, SESSION)
    path.write_bytes(raw)
    v = vault_for(f"c{abs(hash(change))}")
    ingest_file(v, path)
    before = stored(v)
    if change == "rewritten":  # the same size and more: other content in place
        path.write_bytes(other + raw[len(other):] + other)
    elif change == "truncated":  # shorter, then grown with other lines
        path.write_bytes(raw[:raw.rindex(b"\n", 0, LIVE_MIN) + 1] + other)
    elif change == "replaced":  # another file renamed over it: another inode
        new = path.with_name("new.jsonl")
        new.write_bytes(raw + other)
        os.replace(new, path)
    else:  # a line at its start changed, the length kept
        first = raw.index(b"\n")
        path.write_bytes(raw[:first].replace(b'"', b"'", 1) + raw[first:] + other)
    ingest_file(v, path)
    expected = whole(RESUMED, f"c{abs(hash(change))}o")
    got = stored(v)
    # Every message of the appended session is there, in a read whole.
    assert {r[2] for r in expected} <= {r[2] for r in got}
    assert before <= got


@real_data
def test_the_position_is_sealed_and_names_no_path(vault: Vault, tmp_path: Path) -> None:
    path = live(tmp_path, SESSION)
    shutil.copyfile(SESSION, path)
    v = vault_for("sealed")
    ingest_file(v, path)
    raw = _state_bytes(v)
    assert b"read_to" in raw
    for secret in (str(path).encode(), path.name.encode(), b"258c7280", b"toolu_",
                   b"msg_", b'"end"', b'"pin"'):
        assert secret not in raw, secret


def _state_bytes(vault: Vault) -> bytes:
    return vault.store.layout.state_path.read_bytes()


@real_data
def test_a_frozen_user_reingesting_an_unchanged_transcript_writes_nothing(
        vault: Vault, tmp_path: Path) -> None:
    from memvault.ops.admin import set_frozen

    path = live(tmp_path, SESSION)
    shutil.copyfile(SESSION, path)
    v = vault_for("frozen")
    ingest_file(v, path)
    set_frozen(v, True)
    assert ingest_file(v, path).messages_added == 0


@real_data
@pytest.mark.script_launch_mode("subprocess")  # detached background ingests
def test_pre_compact_then_session_end_read_a_live_session_on_from_its_position(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The hooks call the same ingest: PreCompact keeps the session's position, SessionEnd
    reads on from it, and the session holds what one ingest of the whole file holds."""
    from test_hooks import end_payload, hook, log_lines, message_count, wait_background

    monkeypatch.setenv("MEM_LOG_DIR", str(tmp_path / "logs"))

    raw = SESSION.read_bytes()
    ends = line_ends(raw)
    path = live(tmp_path, SESSION)
    path.write_bytes(raw[:ends[len(ends) * 3 // 4]])
    sid = SESSION.stem
    result, _ = hook({**end_payload(path, "PreCompact", trigger="auto"), "session_id": sid})
    assert result.returncode == 0
    wait_background(tmp_path)
    assert b"read_to" in _state_bytes(vault)
    with path.open("ab") as fh:
        fh.write(raw[ends[len(ends) * 3 // 4]:])
    result, _ = hook({**end_payload(path), "session_id": sid})
    assert result.returncode == 0
    wait_background(tmp_path)
    alone = vault_for("hooks-whole")
    ingest_file(alone, SESSION, session=sid)
    own = [r for r in stored(alone) if not str(r[4] or "").startswith("subagent")]
    assert message_count(script_runner, sid) == len([r for r in own if r[0] == "message"]), \
        log_lines(tmp_path / "logs")


# --- a large transcript read whole, in bounded memory ------------------------------------

def _big_session(path: Path, size: int) -> Path:
    """A Claude Code session of about `size` bytes: the real sessions copied end to end,
    each copy's ids its own (as bench/bench_live.py builds it)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    try:
        from bench_live import make_session
    finally:
        sys.path.pop(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    make_session(path, size, "big-session")
    return path


@real_data
@settings(max_examples=8, deadline=None)
@given(size=st.integers(min_value=2_000, max_value=400_000), hold=st.sampled_from([1, 10_000]))
def test_two_passes_in_blocks_read_what_one_read_of_the_whole_file_reads(
        size: int, hold: int) -> None:
    """The first pass chooses the branch from the lines' links alone; the second drafts
    a block at a time: the messages, summaries, sessions, ignored lines and the position
    a later read starts from are those of one read of the whole file (any block size;
    an API message whose lines cross blocks waits for them, or goes out and comes again
    whole)."""
    from memvault.storage.streams import line_blocks
    from memvault.text.transcripts import claude_code

    for source in (SESSION, RESUMED):
        raw = source.read_bytes()
        text = raw.decode()
        one = claude_code.read_on(text)
        assert one is not None

        def texts(raw: bytes = raw) -> Any:
            import io

            lines = 0
            for block in line_blocks(io.BytesIO(raw), len(raw), size):
                yield lines, block.decode()
                lines += block.count(b"\n")

        chosen = claude_code.choose(texts())
        assert chosen is not None
        assert (chosen.pins, chosen.branch, chosen.resume) == (one.pins, one.branch,
                                                               one.resume)
        blocks = claude_code.Blocks(chosen, hold)
        parts = list(texts())
        read = [blocks.read(base, t, end=k == len(parts) - 1)
                for k, (base, t) in enumerate(parts)]
        whole = one.transcript

        def rows(ms: list[Any]) -> list[tuple[Any, ...]]:
            return [(m.message_id, m.role, m.content, m.created_at) for m in ms]

        messages = [m for r in read for m in r.messages]
        if hold > 1:  # the file's order kept
            assert rows(messages) == rows(whole.messages)
        else:  # the last version of each message is the whole one
            assert {m[0]: m for m in rows(messages)} == {m[0]: m for m in rows(whole.messages)}
        assert rows([m for r in read for m in r.summaries]) == rows(whole.summaries)
        assert {k: v for r in read for k, v in r.said_in.items()} == whole.said_in
        ignored: dict[str, int] = {}
        for r in read:
            for reason, n in r.ignored.items():
                ignored[reason] = ignored.get(reason, 0) + n
        assert ignored == whole.ignored
        assert {r.session_id for r in read} == {whole.session_id}


@real_data
@pytest.mark.slow
def test_a_large_transcript_is_ingested_whole_in_bounded_memory(
        vault: Vault, tmp_path: Path) -> None:
    """A first ingest holds a block of lines and the links of the file's lines, never
    the file: its peak (measured in the process) stays far from the file's size times
    the parsed JSON's weight, and it stores what a read of the whole file stores."""
    import subprocess
    import sys

    path = _big_session(tmp_path / "big" / "big.jsonl", 40_000_000)
    mem = str(Path(sys.executable).parent / "mem")
    run = subprocess.run(["/usr/bin/time", "-f", "%M", mem, "ingest", str(path), "--quiet"],  # noqa: S603
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr
    peak_mb = int(run.stderr.strip().splitlines()[-1]) / 1024
    assert peak_mb < 200, peak_mb  # read whole, it took over 250 MB
    from memvault.text.transcripts import claude_code

    expected = claude_code._claude(path.read_text())
    got = stored(vault)
    assert {r[2] for r in got if r[0] == "message"} == {
        m.message_id for m in expected.messages}


@real_data
@pytest.mark.slow
def test_ctrl_c_in_the_first_ingest_of_a_large_transcript_keeps_whole_messages(
        vault: Vault, tmp_path: Path, script_runner: ScriptRunner,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C once the first block's messages are stored (the interrupt comes at the
    second block's write, where a key typed then would land, every run alike): they
    stay, each one whole (as the ingest of the whole file stores it), the run says how
    many, and the same command run again stores the rest, nothing twice."""
    import re

    from memvault.ops import ingest

    path = _big_session(tmp_path / "big" / "big.jsonl", 40_000_000)
    writes: list[int] = []
    real = ingest.add_messages

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        if writes:
            raise KeyboardInterrupt
        done = real(*args, **kwargs)
        writes.append(done.added)
        return done

    monkeypatch.setattr(ingest, "add_messages", interrupted)
    run = script_runner.run(["mem", "ingest", str(path)])
    assert run.returncode == 130, run.stderr
    assert "Traceback" not in run.stderr
    kept = re.search(r"mem: interrupted: ([\d,]+) messages? stored and kept", run.stderr)
    assert kept, run.stderr
    partial = stored(vault)
    assert 0 < len(partial) == int(kept.group(1).replace(",", "")) == writes[0]
    monkeypatch.setattr(ingest, "add_messages", real)
    v = vault_for("whole")
    ingest_file(v, path)
    everything = stored(v)
    assert {r[2:] for r in partial} < {r[2:] for r in everything}  # whole messages only
    ingest_file(vault, path)
    assert {r[2:] for r in stored(vault)} == {r[2:] for r in everything}
