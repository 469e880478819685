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
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest_console_scripts import ScriptRunner

from memvault.errors import NotTranscript
from memvault.ops.ingest import LIVE_MIN, ingest_file
from memvault.vault.vault import Vault
from test_ingest_prefixes import stored, vault_for
from tests.conftest import examples

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
        tmp_path_factory: pytest.TempPathFactory, size: int, hold: int) -> None:
    """The first pass chooses the branch from the lines' links alone; the second drafts
    a block at a time: the messages, summaries, sessions, ignored lines and the position
    a later read starts from are those of one read of the whole file (any block size;
    an API message whose lines cross blocks waits for them, or goes out and comes again
    whole)."""
    from memvault.storage.streams import line_blocks
    from memvault.text.transcripts import claude_code

    tmp_path = tmp_path_factory.mktemp("scratch")
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

        chosen = claude_code.choose(texts(), tmp_path)
        assert chosen is not None
        assert chosen.pins == one.pins
        blocks = claude_code.Blocks(chosen, hold)
        parts = list(texts())
        read = [blocks.read(base, t, end=k == len(parts) - 1)
                for k, (base, t) in enumerate(parts)]
        chosen.close()
        # What only the lines' words tell, the second pass fills in: the last turn's uuid,
        # the branch's turns from the earliest line a later read may start at.
        assert chosen.resume == one.resume
        assert chosen.branch == [(n, u) for n, u in one.branch if n >= min(one.pins)]
        assert not list(tmp_path.iterdir())  # the first pass's table left nothing behind
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


_HEAPS = """
import ctypes, sys, threading
from memvault.storage.streams import freed_to_system
freed_to_system()
libc = ctypes.CDLL(None)
barrier = threading.Barrier(8)
held = []
def work():
    held.append([bytearray(4096) for _ in range(64)])  # from malloc, not Python's pools
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc.fopen.restype = ctypes.c_void_p
out = ctypes.c_void_p(libc.fopen(sys.argv[1].encode(), b"w"))
libc.malloc_info(0, out)
libc.fclose(out)
"""


def test_the_threads_of_a_long_read_share_two_malloc_heaps(tmp_path: Path) -> None:
    """A large transcript's writes each start Tantivy's threads; glibc gives each
    thread a heap (arena) of its own, up to 16 here, and each kept the free chunks
    between its blocks as the file went on: once a long read begins, eight threads at
    work at once share two."""
    import ctypes
    import ctypes.util
    import subprocess
    import sys

    from memvault.storage.streams import ARENAS

    if not hasattr(ctypes.CDLL(None), "malloc_info"):
        pytest.skip("not glibc")
    out = tmp_path / "heaps.xml"
    subprocess.run([sys.executable, "-c", _HEAPS, str(out)], check=True, timeout=60)  # noqa: S603
    assert 1 <= out.read_text().count("<heap nr=") <= ARENAS


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
    # The bound a first ingest keeps whatever the file's size (bench_live measures it
    # from 100 MB to 4 GB); a file of 40 MB read whole would pass it.
    assert peak_mb < 200, peak_mb
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
    stay, each one whole (as the ingest of the whole file stores it), with the block's
    compaction summaries, the run says how many messages, and the same command run again
    stores the rest, nothing twice."""
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
    messages = [r for r in partial if r[0] == "message"]
    assert 0 < len(messages) == int(kept.group(1).replace(",", "")) == writes[0]
    # The first block's summaries are added as it is stored, not at the file's end.
    assert [r for r in partial if r[0] == "summary"]
    monkeypatch.setattr(ingest, "add_messages", real)
    v = vault_for("whole")
    ingest_file(v, path)
    everything = stored(v)
    assert {r[2:] for r in partial} < {r[2:] for r in everything}  # whole messages only
    ingest_file(vault, path)
    assert {r[2:] for r in stored(vault)} == {r[2:] for r in everything}


# --- the first pass on any links, in memory that does not grow with the file ---------------

def _session_lines(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """`n` lines of Claude Code's shape with links of every kind a file may hold: rewinds
    and forks, parents missing, torn or named later, compaction links, sidechain, meta
    and synthetic turns, entries written twice, progress lines, API messages over several
    lines, parallel tool calls answered off the branch."""
    uuids = [f"u{i}" for i in range(n + 5)]
    mids = [f"msg_{i}" for i in range(rng.randint(1, 12))]
    tools = [f"toolu_{i}" for i in range(rng.randint(1, 10))]
    lines: list[dict[str, Any]] = []
    made: list[str] = []
    for k in range(n):
        kind = rng.choice(["user", "assistant", "assistant", "progress", "system", "user"])
        e: dict[str, Any] = {"type": kind, "timestamp": f"2025-01-01T00:{k // 60 % 60:02d}:"
                                                        f"{k % 60:02d}Z"}
        if rng.random() < 0.9:
            e["uuid"] = rng.choice(uuids) if rng.random() < 0.15 else uuids[k]
        r = rng.random()
        if r < 0.6 and made:
            e["parentUuid"] = made[-1]
        elif r < 0.7 and made:
            e["parentUuid"] = rng.choice(made)  # a fork: a rewind, an edited prompt
        elif r < 0.75:
            e["parentUuid"] = rng.choice(uuids)  # a line further on, or none
        elif r < 0.8:
            e["parentUuid"] = None  # a compaction boundary
            if made:
                e["logicalParentUuid"] = rng.choice(made)
        elif r < 0.85:
            e["parentUuid"] = "torn"  # a line never written
        if rng.random() < 0.1:
            e["isSidechain"] = True
        if rng.random() < 0.05:
            e["isMeta"] = True
        if rng.random() < 0.8:
            e["sessionId"] = rng.choice(["s1", "s1", "s2"])
        if kind == "assistant":
            blocks: list[dict[str, Any]] = []
            for _ in range(rng.randint(1, 2)):
                b = rng.choice(["text", "tool_use", "thinking"])
                if b == "text":
                    blocks.append({"type": "text", "text": rng.choice(["hi", "there", "ok"])})
                elif b == "tool_use":
                    blocks.append({"type": "tool_use", "id": rng.choice(tools), "name": "Bash",
                                   "input": {"command": "ls"}})
                else:
                    blocks.append({"type": "thinking", "thinking": "hmm"})
            m: dict[str, Any] = {"role": "assistant", "content": blocks}
            if rng.random() < 0.9:
                m["id"] = rng.choice(mids)
            if rng.random() < 0.05:
                m["model"] = "<synthetic>"
            e["message"] = m
        elif kind == "user":
            e["message"] = {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": rng.choice(tools),
                 "content": rng.choice(["out", "done"])}]} if rng.random() < 0.5 else {
                "role": "user", "content": rng.choice(
                    ["hello", "do it", "<system-reminder>x</system-reminder>"])}
        elif kind == "system":
            e["subtype"] = rng.choice(["local_command", "other"])
            e["content"] = "<command-name>/clear</command-name>"
        if rng.random() < 0.03:
            e["isApiErrorMessage"] = True
        lines.append(e)
        if isinstance(e.get("uuid"), str):
            made.append(e["uuid"])
        if rng.random() < 0.03:
            lines.append(e)  # an entry written twice
    return lines


def _blocks(raw: bytes, size: int) -> Any:
    import io

    from memvault.storage.streams import line_blocks

    lines = 0
    for block in line_blocks(io.BytesIO(raw), len(raw), size):
        yield lines, block.decode()
        lines += block.count(b"\n")


def _two_passes(raw: bytes, size: int, scratch: Path) -> tuple[Any, Any, list[Any]] | None:
    """The first pass's choice and the second pass's reads, in blocks of `size`."""
    from memvault.text.transcripts import claude_code

    chosen = claude_code.choose(_blocks(raw, size), scratch)
    if chosen is None:
        return None
    blocks = claude_code.Blocks(chosen)
    parts = list(_blocks(raw, size))
    try:
        read = [blocks.read(base, t, end=k == len(parts) - 1)
                for k, (base, t) in enumerate(parts)]
    finally:
        chosen.close()
    return chosen, blocks, read


@settings(max_examples=examples(400), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(min_value=0, max_value=2**32), n=st.integers(min_value=1, max_value=80),
       size=st.sampled_from([64, 300, 1 << 20]))
def test_the_first_pass_chooses_on_any_links_what_one_read_chooses(
        tmp_path: Path, seed: int, n: int, size: int) -> None:
    """On lines with links of every kind (see _session_lines), the two passes store what
    one read of the whole file stores, in its order, and keep for a later read what it
    keeps: the branch is chosen on the links alone, each line as a read of the whole
    file takes it (a line that is no turn is a line like any other on the way back)."""
    import json

    from memvault.text.transcripts import claude_code

    raw = "".join(json.dumps(e) + "\n" for e in _session_lines(random.Random(seed), n)).encode()
    try:
        one = claude_code.read_on(raw.decode())
    except NotTranscript:
        one = None  # a compaction agent's file, which the two passes do not read either
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    got = _two_passes(raw, size, scratch)
    if got is None or one is None:
        assert one is None or one.resume.sub is True
        return
    chosen, _, read = got
    whole = one.transcript

    def rows(ms: list[Any]) -> list[tuple[Any, ...]]:
        return [(m.message_id, m.role, m.content, m.created_at) for m in ms]

    assert rows([m for r in read for m in r.messages]) == rows(whole.messages)
    assert rows([m for r in read for m in r.summaries]) == rows(whole.summaries)
    assert {k: v for r in read for k, v in r.said_in.items()} == whole.said_in
    assert {r.session_id for r in read} <= {whole.session_id}
    assert sum((Counter(r.ignored) for r in read), Counter()) == Counter(whole.ignored)
    assert (chosen.pins, chosen.resume) == (one.pins, one.resume)
    assert chosen.branch == [(k, u) for k, u in one.branch if one.pins and k >= min(one.pins)]
    assert not list(scratch.iterdir())  # the first pass's table left nothing behind


def test_a_turn_whose_parent_is_missing_goes_on_from_the_line_before_it(
        vault: Vault, tmp_path: Path) -> None:
    """A parent never written (a torn line) is bridged to the line just before: in a large
    file read in two passes as in a small one read whole, whatever that line is (here
    the progress lines of a long tool run), so an answer abandoned by a rewind before
    them stays out."""
    import json

    from memvault.text.transcripts import claude_code

    def line(uuid: str, parent: str | None, kind: str, text: str = "") -> str:
        e: dict[str, Any] = {"type": kind, "uuid": uuid, "parentUuid": parent,
                             "sessionId": "torn-parent", "timestamp": "2025-01-01T00:00:00Z"}
        if kind != "progress":
            e["message"] = {"role": kind, "content": text, **(
                {"id": f"msg-{uuid}"} if kind == "assistant" else {})}
        else:
            e["data"] = {"output": "x" * 200}
        return json.dumps(e) + "\n"

    text = line("a", None, "user", "which bird returned?") + line(
        "b", "a", "assistant", "an abandoned answer") + "".join(
        line(f"p{i}", "a", "progress") for i in range(LIVE_MIN // 250)) + line(
        "c", "gone", "user", "the heron returned") + line("d", "c", "assistant", "noted")
    path = tmp_path / "torn.jsonl"
    path.write_text(text)
    assert path.stat().st_size > LIVE_MIN  # read in two passes
    ingest_file(vault, path)
    expected = claude_code._claude(text).messages
    assert "an abandoned answer" not in {m.content for m in expected}
    assert sorted(r[2] for r in stored(vault) if r[0] == "message") == sorted(
        m.message_id for m in expected)


def _links_peak(lines: int) -> float:
    """The peak memory (MB) of a process that runs the first pass over `lines` lines."""
    import subprocess
    import sys

    code = f"""
import json, random, resource, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_ingest_incremental import _session_lines
from memvault.text.transcripts import claude_code
from memvault.storage.streams import freed_to_system

def blocks():
    rng = random.Random(7)
    done = 0
    while done < {lines}:  # blocks of chained turns, made as they are read
        text = "".join(json.dumps(dict(e, uuid=f"{{e.get('uuid')}}-{{done}}", parentUuid=(
            f"{{e.get('parentUuid')}}-{{done}}"))) + "\\n" for e in _session_lines(rng, 5000))
        yield done, text
        done += text.count("\\n")

freed_to_system()
chosen = claude_code.choose(blocks())
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,  # noqa: S603
                         timeout=600, check=True)
    return float(run.stdout.split()[-1])


@pytest.mark.slow
def test_the_first_pass_holds_as_much_for_a_long_file_as_for_a_short_one() -> None:
    """The first pass keeps each line's links in a table on disk, never in memory: over
    ten times the lines, its peak memory is the same but for one bit a line (the old
    first pass held each line's links and ids in memory, 12 MB more for each 100 MB)."""
    short, long = _links_peak(40_000), _links_peak(400_000)
    assert long - short < 8, (short, long)


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""  # the listing's own, closed since


@real_data
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads the table through /proc")
def test_the_first_pass_table_holds_no_id_nor_word_in_clear(tmp_path: Path) -> None:
    """The table the first pass keeps on disk (in the vault's folder given, unlinked as
    soon as open) holds line numbers, flags and digests under a key of the run: none of
    the file's ids (uuids, API message ids, tool call ids, the session) nor its words."""
    import json

    from memvault.text.transcripts import claude_code

    raw = SESSION.read_bytes()
    ids: set[str] = set()

    def collect(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("uuid", "parentUuid", "sessionId", "id", "tool_use_id") and (
                        isinstance(item, str) and len(item) >= 8):
                    ids.add(item)
                collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)

    for line in raw.splitlines():
        collect(json.loads(line))
    assert len(ids) > 100
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    chosen = claude_code.choose(_blocks(raw, 1 << 16), scratch)
    assert chosen is not None
    try:
        assert not list(scratch.iterdir())  # unlinked at once: nothing left by a kill
        tables = [fd for fd in os.listdir("/proc/self/fd")
                  if _target(fd).startswith(str(scratch))]
        assert len(tables) == 1
        with open(f"/proc/self/fd/{tables[0]}", "rb") as fh:
            table = fh.read()
    finally:
        chosen.close()
    assert len(table) > 100_000  # the lines' links are there, on disk
    assert not [i for i in ids if i.encode() in table]
    assert b"assistant" not in table and b"tool_use" not in table


# --- what a block's write holds while the index merges ---------------------------------

def _merged_away_mapped(index_dir: Path) -> list[str]:
    """The index's files this process still maps though they are deleted (a segment a
    merge replaced)."""
    maps = Path("/proc/self/maps").read_text().splitlines()
    return [line for line in maps if str(index_dir) in line and line.endswith("(deleted)")]


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="no /proc maps")
def test_a_commit_lets_go_of_the_reader_so_merged_segments_are_unmapped(
        vault: Vault) -> None:
    """Each write checks the index with a reader; a commit then lets it go, so once a
    merge the commit started has replaced segments, none of them stays mapped (a merge
    reads each whole: a reader kept across it held all of that, growing with the
    file). Eight commits of one record each: the eighth merges the eight segments."""
    import time

    from memvault.model.records import Filters
    from memvault.ops import remember

    remember.add(vault, "the first record makes the user", "fact")
    index = vault.search_index(vault.state().key_version)
    with index.hold():  # one writer, its merges running on between the writes
        for i in range(8):
            remember.add(vault, f"fact number {i} about the staging proxy", "fact")
        deadline = time.monotonic() + 20
        while _merged_away_mapped(index.path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _merged_away_mapped(index.path) == []
    assert len(index.matching(index.build_query("staging proxy", Filters())[0])) == 8


@real_data
def test_a_block_is_let_go_before_its_messages_are_stored(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second pass reads, drafts and stores a block before it reads the next, and
    lets the block's bytes and text go before its write: at each write's index commit
    (where Tantivy may merge), what reading the file allocated and still holds is less
    than a block (it held the block stored, the next one's text and two copies of its
    bytes: four blocks)."""
    import tracemalloc

    from memvault.index import keyed
    from memvault.storage import streams

    block = 256 << 10
    monkeypatch.setattr(streams, "LINE_BLOCK", block)
    path = _big_session(tmp_path / "big" / "big.jsonl", 3_000_000)
    held: list[int] = []
    commit = keyed.IndexWriter.commit

    def measured(self: keyed.IndexWriter) -> None:
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(True, streams.__file__)])
        held.append(sum(stat.size for stat in snapshot.statistics("filename")))
        commit(self)

    monkeypatch.setattr(keyed.IndexWriter, "commit", measured)
    tracemalloc.start()
    try:
        ingest_file(vault, path)
    finally:
        tracemalloc.stop()
    assert len(held) > 8  # a write a block
    assert max(held) < block, held
    from memvault.text.transcripts import claude_code

    expected = claude_code._claude(path.read_text())
    assert {r[2] for r in stored(vault) if r[0] == "message"} == {
        m.message_id for m in expected.messages}
