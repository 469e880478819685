"""Progress and interruption, on a real terminal: the installed `mem` runs with its stderr
on a pseudo-terminal (its controlling terminal, as in a shell), its stdout on a pipe.

A bar is drawn on the terminal, never on a pipe nor with --json (whose stdout is the same
document either way). Ctrl-C (the terminal's ^C, to the whole foreground process group)
stops a command with one line that says what was kept and exit 130, no traceback; what
was kept is there, nothing is stored twice, and running the command again finishes it.

No test waits on a clock: a compaction is interrupted while its summariser is blocked
(a process that waits for the test), a scan by a SIGINT strace delivers at the n-th call
of one system call (as tests/crash_harness.py kills commands).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import open_as
from memvault.config import resolve
from memvault.model.records import Filters, NewMessage
from memvault.ops import ingest, recall
from memvault.ops.admin import init

MEM = str(Path(sys.executable).parent / "mem")
STRACE = shutil.which("strace") or "/usr/bin/strace"
INTERRUPTED = re.compile(rb"mem: interrupted: ([^\r\n]*)")


@dataclass
class Run:
    returncode: int
    stdout: bytes
    terminal: bytes  # all the terminal received (stderr): escape sequences included

    @property
    def shown(self) -> str:
        """The terminal's text without escape sequences, one line per redraw."""
        text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", self.terminal).replace(b"\r", b"\n")
        return text.decode(errors="replace")


def _controlling_terminal_of(fd: int) -> Callable[[], None]:
    """In the child: a session of its own whose controlling terminal is the pty on `fd`,
    its process group in the foreground (as a shell starts a command)."""
    def setup() -> None:
        os.setsid()
        fcntl.ioctl(fd, termios.TIOCSCTTY, 0)
        # Ctrl-C reaches it as a shell's foreground command: a suite started in the
        # background (`make test &`) hands its children SIGINT ignored.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    return setup


def on_terminal(args: list[str], until: Callable[[bytes], bool] | None = None,
                env: dict[str, str] | None = None, wrapper: tuple[str, ...] = (),
                limit: float = 120, stdin: int | None = None) -> Run:
    """Run `mem ARGS` with stderr (and stdin, unless given) on a new pty, its controlling
    terminal, and stdout on a pipe; when `until` holds for what the terminal received,
    type Ctrl-C on it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen(  # noqa: S603
        [*wrapper, MEM, *args], stdin=slave if stdin is None else stdin,
        stdout=subprocess.PIPE, stderr=slave,
        env={**os.environ, "TERM": "xterm", **(env or {})},
        preexec_fn=_controlling_terminal_of(2))  # noqa: PLW1509 - no threads here yet
    os.close(slave)
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()))  # type: ignore[union-attr]
    reader.start()
    seen = bytearray()
    typed = until is None
    deadline = time.monotonic() + limit  # a bound on a hung run, not a speed claim
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every process holding the terminal is gone
                    break
                if not chunk:
                    break
                seen += chunk
            if not typed and until is not None and until(bytes(seen)):
                os.write(master, b"\x03")  # Ctrl-C, as typed
                typed = True
                # The bound starts again: a slow start (a loaded machine) is not a hang,
                # and what failed is then told apart.
                deadline = time.monotonic() + limit
        else:
            state = ("no Ctrl-C was to be typed" if until is None
                     else "after Ctrl-C" if typed else "before Ctrl-C")
            raise AssertionError(f"mem did not end ({state}): {bytes(seen)[-2000:]!r}")
        returncode = proc.wait(limit)
    finally:
        with contextlib.suppress(OSError):
            proc.kill()
        os.close(master)
        reader.join(limit)
    return Run(returncode, out[0] if out else b"", bytes(seen))


def piped(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([MEM, *args], capture_output=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})}, timeout=120, check=False)


def transcripts(folder: Path, count: int, messages: int = 40, compress: bool = False
                ) -> None:
    """`count` jsonl transcripts (zstd-compressed: a scan ingests each on its own), their
    message ids named after the folder."""
    folder.mkdir()
    for n in range(count):
        lines = "".join(json.dumps({"id": f"{folder.name}{n}m{i}", "role": "user",
                                    "content": f"transcript {n} message {i} about tulips",
                                    "timestamp": "2026-01-02T03:04:05Z"}) + "\n"
                        for i in range(messages))
        if compress:
            import zstandard

            (folder / f"s{n}.jsonl.zst").write_bytes(
                zstandard.ZstdCompressor().compress(lines.encode()))
        else:
            (folder / f"s{n}.jsonl").write_text(lines)


def stored_messages(user: str = "alice") -> list[str]:
    records = recall.list_records(open_as(user), Filters(limit=100_000, types=["message"],
                                                         include_archive=True)).records
    return [r.message_id or "" for r in records]


# --- a bar on a terminal, none elsewhere --------------------------------------------------


def test_verify_draws_a_bar_on_a_terminal_and_none_in_a_pipe_or_with_json(tmp_path: Path
                                                                         ) -> None:
    init(resolve())
    for n in range(12):
        ingest.add_messages(open_as("alice"), f"s{n}", [NewMessage(f"note {n}", "user")])
    shown = on_terminal(["verify"])
    assert shown.returncode == 0, shown.shown
    # Drawn at the start and at the end (not only on rich's clock): both always appear.
    assert re.search(r"verifying .*\b0/12 files", shown.shown), shown.shown
    assert re.search(r"verifying .*\b12/12 files", shown.shown), shown.shown
    assert "ok: 15 files, 12 records checked" in shown.shown
    assert shown.stdout == b""  # the bar and the summary are stderr's

    quiet = on_terminal(["verify", "--json"])
    assert quiet.returncode == 0 and "files" not in quiet.shown and "\x1b" not in quiet.shown
    pipe = piped("verify", "--json")
    assert pipe.stderr == b""
    assert json.loads(quiet.stdout) == json.loads(pipe.stdout)
    plain = piped("verify")
    assert plain.stderr.decode() == "ok: 15 files, 12 records checked\n"


def test_a_scan_draws_its_bar_only_on_a_terminal_and_its_json_is_the_same(
        tmp_path: Path) -> None:
    init(resolve())
    transcripts(tmp_path / "t", 6)
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "vault", other)
    shown = on_terminal(["ingest", "--scan", str(tmp_path / "t"), "--format", "jsonl",
                         "--json"])
    assert shown.returncode == 0 and "transcripts" not in shown.shown, shown.shown
    pipe = piped("ingest", "--scan", str(tmp_path / "t"), "--format", "jsonl", "--json",
                 env={"MEM_VAULT": str(other)})
    # No bar: the one line on stderr is the note that the first write made the user.
    assert pipe.returncode == 0
    assert pipe.stderr == b"created user alice in org default\n", pipe.stderr
    assert json.loads(shown.stdout) == json.loads(pipe.stdout)
    assert json.loads(pipe.stdout)["messages_added"] == 240

    transcripts(tmp_path / "more", 5)
    drawn = on_terminal(["ingest", "--scan", str(tmp_path / "more"), "--format", "jsonl"])
    assert drawn.returncode == 0
    assert re.search(r"ingesting .*\b5/5 transcripts", drawn.shown), drawn.shown
    assert "5 of 5 transcripts ingested, 200 messages added" in drawn.shown
    # --quiet: nothing on the terminal at all.
    transcripts(tmp_path / "last", 2)
    silent = on_terminal(["ingest", "--scan", str(tmp_path / "last"), "--format", "jsonl",
                          "-q"])
    assert (silent.returncode, silent.terminal, silent.stdout) == (0, b"", b"")


# --- Ctrl-C ---------------------------------------------------------------------------------


def _with_token(token: str) -> list[int]:
    """Live processes whose environment holds `token` (mem and its pool's workers)."""
    found = []
    for name in os.listdir("/proc"):
        with contextlib.suppress(OSError, IndexError):
            if token.encode() in Path(f"/proc/{name}/environ").read_bytes():
                state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state not in ("Z", "X"):
                    found.append(int(name))
    return found


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


@pytest.mark.long  # a fault run: `make test-long` and CI
def test_ctrl_c_stops_a_compaction_pool_keeps_what_was_done_and_leaves_no_process(
        tmp_path: Path) -> None:
    """Four users, two workers; the summariser answers twice, then blocks until the test
    lets it go. Ctrl-C once two users are done and the other two are being summarised."""
    init(resolve())
    old = datetime.now(UTC) - timedelta(days=200)
    users = ["u1", "u2", "u3", "u4"]
    for user in users:
        ingest.add_messages(open_as(user), "old", [
            NewMessage(f"{user} talked about canals {i}", "user", f"m{i}",
                       (old + timedelta(minutes=i)).isoformat().replace("+00:00", "Z"))
            for i in range(30)])
    calls = tmp_path / "calls"
    calls.mkdir()
    summariser = tmp_path / "summarise"
    summariser.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""
        import os, sys, time
        sys.stdin.read()
        n = 1
        while True:  # this call's number, from files only one call can create
            try:
                os.close(os.open(f"{calls}/call-{{n}}", os.O_CREAT | os.O_EXCL))
                break
            except FileExistsError:
                n += 1
        if n > 2 and not os.path.exists("{calls}/release"):
            with open(f"{calls}/blocked-{{n}}", "w") as f:
                f.write(str(os.getpid()))
            time.sleep(3600)  # until killed: mem's keeper ends it with its worker
        print("They talked about canals")
    """))
    summariser.chmod(0o755)
    token = uuid.uuid4().hex
    args = ["compact", "--all-users", "--jobs", "2", "--summarizer", str(summariser)]

    def both_blocked(seen: bytes) -> bool:
        blocked = list(calls.glob("blocked-*"))
        return len(blocked) == 2 and b"2/4 users" in seen

    run = on_terminal(args, until=both_blocked, env={"MEMTEST_TOKEN": token})
    assert run.returncode == 130, run.shown
    assert "Traceback" not in run.shown and "Aborted" not in run.shown
    said = INTERRUPTED.findall(run.terminal)
    assert said == [b"2 of 4 users compacted and kept (a step cut short is finished or "
                    b"undone by the next command); run the same command again to resume"], \
        run.shown
    assert run.stdout == b""
    # mem waited for its workers: none outlives it.
    assert _with_token(token) == []
    # The blocked summarisers are ended by their keepers (a bound, not a speed claim).
    pids = [int(p.read_text()) for p in calls.glob("blocked-*")]
    deadline = time.monotonic() + 30
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in pids), pids

    done = [u for u in users if any(r.type == "summary" for r in recall.list_records(
        open_as(u), Filters(limit=100, include_archive=True)).records)]
    assert len(done) == 2, done
    (calls / "release").touch()
    again = piped(*args, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["summaries_added"] == 2
    for user in users:
        records = recall.list_records(open_as(user), Filters(
            limit=1000, include_archive=True, include_superseded=True)).records
        assert len([r for r in records if r.type == "summary"]) == 1, user
        assert sorted(r.message_id or "" for r in records if r.type == "message") == \
            sorted(f"m{i}" for i in range(30))
        report = piped("verify", "--json", env={"MEM_USER": user})
        assert json.loads(report.stdout)["ok"], report.stdout


def _rollout(first: int, last: int, meta: bool = True) -> bytes:
    """Lines of a Codex rollout: its session, then user turns `first`..`last`-1."""
    lines = [{"timestamp": "2026-03-02T10:00:00.000Z", "type": "session_meta",
              "payload": {"id": "r-1", "timestamp": "2026-03-02T10:00:00Z"}}] if meta else []
    lines += [{"timestamp": "2026-03-02T10:00:01.000Z", "type": "response_item",
               "payload": {"type": "message", "role": "user",
                           "content": [{"type": "input_text", "text": f"turn {n} of tulips"}]}}
              for n in range(first, last)]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


@pytest.mark.long  # a fault run: `make test-long` and CI
def test_ctrl_c_in_a_streamed_ingest_keeps_the_batches_stored(tmp_path: Path) -> None:
    """A rollout on stdin is stored batch by batch (5,000 messages each). stdin never
    ends (the test holds it open): once the bar says a batch is stored, Ctrl-C is typed;
    whatever mem is doing then, what it says was kept is stored, once, and the same
    command with the whole rollout stores the rest."""
    init(resolve())
    read, write = os.pipe()

    def feed() -> None:
        with contextlib.suppress(OSError):  # the reader gone: the pipe is closed
            data = memoryview(_rollout(0, 8_000))
            while data:
                data = data[os.write(write, data):]

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        run = on_terminal(["ingest", "-"], stdin=read,
                          until=lambda seen: b"messages stored" in seen)
    finally:
        os.close(read)
        feeder.join()
        os.close(write)
    assert run.returncode == 130, run.shown
    assert "Traceback" not in run.shown
    (said,) = INTERRUPTED.findall(run.terminal)
    kept = re.fullmatch(rb"(\d+) messages stored and kept; run the same command again to "
                        rb"resume \(what is stored is skipped\)", said)
    assert kept, said
    # Counted from the session file's lines (one a message), without decrypting them.
    lines = sum(len(f.read_bytes().splitlines())
                for f in (tmp_path / "vault" / "default" / "alice" / "sessions").iterdir())
    assert lines >= int(kept.group(1)) >= 5000
    again = subprocess.run([MEM, "ingest", "-", "--json"], input=_rollout(0, 8_000),
                           capture_output=True, timeout=120, check=False)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["messages_added"] == 8_000 - lines
    stored = stored_messages()
    assert sorted(stored) == sorted(set(stored)) and len(stored) == 8_000


@pytest.mark.skipif(not Path(STRACE).is_file(), reason="needs strace")
def test_ctrl_c_in_a_scan_keeps_the_transcripts_done_and_the_next_scan_ends_it(
        tmp_path: Path) -> None:
    """SIGINT at the 10th rename: the state saved by the third transcript's first write
    (each compressed transcript is ingested on its own: its messages, then its scan mark;
    the first one's also creates the user)."""
    init(resolve())
    transcripts(tmp_path / "t", 4, compress=True)
    args = ["ingest", "--scan", str(tmp_path / "t"), "--format", "jsonl"]
    wrapper = (STRACE, "-f", "-qq", "-o", os.devnull, "-e", "trace=rename",
               "-e", "inject=rename:signal=INT:when=10")
    run = on_terminal(args, wrapper=wrapper)
    assert run.returncode == 130, run.shown
    assert "Traceback" not in run.shown
    assert re.search(r"ingesting .*/4 transcripts", run.shown), run.shown
    (said,) = INTERRUPTED.findall(run.terminal)
    kept = re.fullmatch(rb"(\d) of 4 transcripts ingested and kept; run the same command "
                        rb"again to resume", said)
    assert kept and int(kept.group(1)) == 2, said
    # What was kept is there, once; what was under way is either there or not, once.
    partial = stored_messages()
    assert len(partial) == len(set(partial)) >= 40 * int(kept.group(1))

    again = piped(*args, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["files_ingested"] == 4 - int(kept.group(1))
    everything = stored_messages()
    assert sorted(everything) == sorted(f"t{n}m{i}" for n in range(4) for i in range(40))
    report = piped("verify", "--json")
    assert json.loads(report.stdout)["ok"], report.stdout
    assert json.loads(piped(*args, "--json").stdout)["files_ingested"] == 0


def test_the_exit_code_table_names_every_code_mem_exits_with() -> None:
    """docs/cli.md's table is made from cli/errors.py: every error's code is in it, and
    130, Ctrl-C's, too."""
    from memvault import errors
    from memvault.cli.errors import EXIT_CODES

    codes = [code for code, _ in EXIT_CODES]
    assert len(codes) == len(set(codes))
    errors_codes = {cls.exit_code for cls in vars(errors).values()
                    if isinstance(cls, type) and issubclass(cls, errors.MemError)}
    constants = {v for k, v in vars(errors).items() if k.startswith("EX_")}
    assert errors_codes | constants == set(codes)
    assert errors.EX_INTERRUPTED == 130
