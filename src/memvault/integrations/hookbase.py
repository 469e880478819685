"""What every agent's hook shares: the error boundary, the log, the brief, the background
ingest, and the settings-file edits of the installers.

A hook must never slow down or break the agent: it always exits 0, answers SessionStart
from the vault directly, hands transcript ingestion to a detached process, and logs its
failures (time, agent, event, session, outcome; never content) to a file under the
platform's log directory. Each agent (claude_code.py, codex.py, gemini.py) names its events
and the shape of its answer in an `Agent`; the rest is here, once.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import re
import shlex
import stat
import subprocess  # noqa: S404 - runs mem itself, never a shell
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from memvault.config import Settings
from memvault.errors import MemError, UsageError
from memvault.model.location import session_name
from memvault.model.machine_results import HookInstallResult
from memvault.storage import fsio

LOG_FILE = "hooks.log"
# The background ingest's stderr is the hook log: this variable hands it the stamp of the
# run that started it, and every line it writes is stamped as log() stamps its own.
LOG_STAMP_ENV = "MEM_HOOK_LOG_AS"
MAX_STDIN = 1 << 20
HOOK_TIMEOUT_S = 10
# MEM_KEY_COMMAND in a hook: well inside the time an agent gives the hook, so that a
# hanging password manager costs the agent this long, never the hook's whole budget.
HOOK_KEY_COMMAND_TIMEOUT = HOOK_TIMEOUT_S / 2
# How long the background ingest waits for the user's lock, at least: no one waits on it,
# and a sync pulling a large remote or a compaction holds the lock for minutes. Given up
# sooner, a SessionEnd's transcript would wait for someone's `mem ingest`.
BACKGROUND_LOCK_WAIT_S = 600.0
# The largest transcript handed to the background ingest: ops/ingest.py reads a Claude
# Code transcript whole, up to this size.
MAX_TRANSCRIPT = 256 << 20
# Claude Code writes hook output of 10,000 characters or more to a file (in plaintext)
# and shows the agent only a preview: whatever a hook prints stays under this.
MAX_CONTEXT_CHARS = 9500
CUT_NOTE = "\n[… the rest of the brief was cut to fit the hook's output limit]"

Handler = Callable[[Settings, dict[str, Any], str], "str | None"]


@dataclass(frozen=True)
class Agent:
    """An agent's hook contract: its name, which events brief and which ingest, and
    how its SessionStart answer is shaped."""

    name: str  # as in `mem hook NAME`, the log and the audit actor
    ingest_format: str  # `mem ingest --format`
    brief_events: frozenset[str]
    ingest_events: frozenset[str]
    answer: Callable[[str, str], dict[str, Any]]  # (event, context) -> stdout document
    # Events whose stdout the agent feeds to its model elsewhere (PreCompact's into the
    # compaction prompt): they print nothing.
    quiet_events: frozenset[str] = field(default_factory=frozenset)
    # Where the transcript is when the event names none (OpenCode's store), from the
    # event: its path, or None.
    transcript: Callable[[dict[str, Any]], str | None] | None = None
    # Whether the transcript holds this session alone. A store of every session (OpenCode's
    # database) names each message's session and project itself: the ingest is given
    # neither, or every session in it would be stored under this one.
    one_session: bool = True


def hook_specific(event: str, context: str) -> dict[str, Any]:
    """`{"hookSpecificOutput": {"hookEventName", "additionalContext"}}`: the SessionStart
    answer of Claude Code, Codex and Gemini CLI alike."""
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}}


def log(settings: Settings | None, agent: str, event: str, outcome: str,
        session: str | None = None) -> None:
    """One line per hook run: time, agent, event, session, outcome. Outcomes never hold
    memory content."""
    try:
        if settings is not None:
            directory = settings.log_dir
        else:  # the settings themselves failed: still never the agent's working directory
            import platformdirs

            directory = Path(os.environ.get("MEM_LOG_DIR") or platformdirs.user_log_dir("mem"))
        fsio.ensure_dir(directory)
        line = f"{_now()} {_stamp(agent, event, session)}: {outcome}\n"
        fsio.append_line(directory / LOG_FILE, line.encode(), sync=False)
    except Exception:  # noqa: S110 - logging must never break the agent either
        pass


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _stamp(agent: str, event: str, session: str | None) -> str:
    where = f" [{shown(session, 80)}]" if session else ""
    return f"{agent} {event}{where}"


class StampedLog(io.TextIOBase):
    """The background ingest's stderr, which is the hook log: each line it writes (an
    error, a warning) becomes a log line stamped with the time and the run that started
    it, written whole in one append. A line the process leaves unfinished is written at
    its exit."""

    def __init__(self, stamp: str, fd: int) -> None:
        self._stamp, self._fd, self._pending = stamp, fd, ""
        atexit.register(self._rest)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fd

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._emit(line)
        return len(text)

    def _rest(self) -> None:
        pending, self._pending = self._pending, ""
        self._emit(pending)

    def _emit(self, line: str) -> None:
        if line.strip():
            try:
                os.write(self._fd, f"{_now()} {self._stamp}: {shown(line, 1000)}\n".encode())
            except OSError:  # the log cannot be written: the ingest goes on regardless
                pass


def stamp_stderr(stamp: str) -> None:
    """Make stderr the hook log's stamped lines (the background ingest, see LOG_STAMP_ENV)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return  # no stderr to stamp
    sys.stderr = StampedLog(shown(stamp, 200), fd)


@dataclass(frozen=True)
class LogLine:
    """One run as the log has it (log() writes them; a detached ingest's own error line,
    "mem: error: ...", has no time and belongs to the run before it)."""

    at: datetime | None
    agent: str
    event: str
    outcome: str

    @property
    def failed(self) -> bool:
        return self.outcome.startswith(FAILED)


FAILED = ("failed", "server not started", "mem: error:")
LOG_TAIL = 256 << 10  # the log's end read by `mem doctor`: thousands of runs
_LOG_RE = re.compile(r"(\S+) (\S+) (\S+?)(?: \[.*?\])?: (.*)")
# What an earlier mem logged, unstamped, for a session with nothing to keep.
_NOTHING_BEFORE = re.compile(r"mem: error: (no \S+ messages in the transcript|the "
                             r"transcript is empty)\b")
NOTHING_TO_KEEP = "nothing to keep"


def read_log(directory: Path, tail: int = LOG_TAIL) -> list[LogLine]:
    """The runs at the end of the log (its last `tail` bytes), oldest first; [] when there
    is no log."""
    try:
        with open(directory / LOG_FILE, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - tail))
            data = fh.read(tail)
    except OSError:
        return []
    lines = data.decode(errors="replace").splitlines()[1 if size > tail else 0:]
    out: list[LogLine] = []
    for line in lines:
        if line.startswith("mem: error:"):  # an earlier background ingest's, unstamped
            # A session with nothing to keep was an error then; it no longer fails.
            outcome = NOTHING_TO_KEEP if _NOTHING_BEFORE.match(line) else shown(line, 300)
            out.append(LogLine(out[-1].at if out else None, "ingest", "background",
                               outcome))
            continue
        match = _LOG_RE.fullmatch(line)
        if match is None:
            continue
        when, agent, event, outcome = match.groups()
        try:
            at: datetime | None = datetime.strptime(when, "%Y-%m-%dT%H:%M:%S%z")
        except ValueError:
            continue
        out.append(LogLine(at, agent, event, shown(outcome, 300)))
    return out


def open_failures(runs: list[LogLine], since: datetime) -> list[LogLine]:
    """Each agent's last failure since `since`, unless a later run of it went well: what
    is still failing, newest first."""
    last: dict[str, LogLine] = {}
    for run in runs:
        if run.failed:
            last[run.agent] = run
        elif not run.outcome.startswith("ignored"):
            last.pop(run.agent, None)
    return sorted((r for r in last.values() if r.at is None or r.at >= since),
                  key=lambda r: r.at or since, reverse=True)


def mem_command() -> list[str]:
    """How to run this same mem again (the installed script, or `python -m memvault`)."""
    script = Path(sys.argv[0])
    if script.name in ("mem", "memvault") and script.exists():
        return [str(script.resolve())]
    return [sys.executable, "-m", "memvault"]


def portable_command() -> list[str]:
    """The command for a file meant to be committed (a project's settings, a plugin):
    `mem` from PATH, never this machine's path."""
    return ["mem"]


def actor(agent: str, event: str) -> str:
    """How the audit log names a hook run."""
    return f"hook:{agent}:{event}"


def frame_room() -> int:
    """How much of the hook's output limit the brief itself may take: the limit less the
    frame's tags and preamble (the same length for every nonce)."""
    from memvault.text import frame as framing

    return MAX_CONTEXT_CHARS - len(framing.render("", "0" * framing.NONCE_HEX))


def frame_tokens() -> int:
    """The estimated tokens the frame adds to a brief (text/tokens.py), for the nonce
    that costs most (a letter and a digit in turn): a brief of `n` tokens reaches the
    agent as at most `n + frame_tokens()`."""
    from memvault.text import frame as framing
    from memvault.text.tokens import estimate

    return estimate(framing.render("", "a0" * (framing.NONCE_HEX // 2)))


def frame(brief: str) -> str:
    """The brief as the agent receives it: inside mem's frame (text/frame.py), whose
    tags carry a nonce drawn for this brief alone, marked as reference data, not
    instructions, and clamped under MAX_CONTEXT_CHARS at a line boundary."""
    import secrets

    from memvault.text import frame as framing

    nonce = secrets.token_hex(framing.NONCE_HEX // 2)
    room = frame_room()
    body = framing.neutralise(brief.rstrip("\n"))  # first: the cut measures what is shown
    if len(body) > room:
        cut = body[: room - len(CUT_NOTE)]
        cut = cut[: cut.rfind("\n")] if "\n" in cut else cut
        body = cut + CUT_NOTE
    return framing.render(body, nonce)


def run(agent: Agent, settings_factory: Any, stdin: BinaryIO | None = None,
        stdout: TextIO | None = None) -> None:
    """The whole hook run, from stdin to stdout: reads at most MAX_STDIN + 1 bytes (a
    larger payload is refused, never read whole), answers, and never raises, whatever
    stdin and stdout are (closed, a reader gone): a hook exits 0."""
    data = read_stdin(stdin if stdin is not None else _std_stream("stdin"))
    output = handle(agent, settings_factory, data)
    if output:
        emit(output + "\n", stdout if stdout is not None else _std_stream("stdout"))


def _std_stream(name: str) -> Any:
    """sys.stdin's byte buffer or sys.stdout, or None when the process has none (started
    with the descriptor closed: its number may then belong to another file, never
    written to)."""
    stream = getattr(sys, name, None)
    if stream is None:
        return None
    return getattr(stream, "buffer", None) if name == "stdin" else stream


def read_stdin(stream: BinaryIO | None) -> bytes:
    """At most MAX_STDIN + 1 bytes: enough to know that a payload is too large."""
    if stream is None:
        return b""
    data = bytearray()
    try:
        while len(data) <= MAX_STDIN:
            chunk = stream.read(MAX_STDIN + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except (OSError, ValueError):  # closed, or not readable
        pass
    return bytes(data)


def emit(text: str, stream: TextIO | None) -> None:
    """Write the hook's answer; a closed stdout or a reader that went away is no error.
    After a failed write stdout points at /dev/null, so that the flush at exit cannot
    fail again (that would exit 120)."""
    if stream is None:
        return
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass


def entry_points(agent: Agent) -> tuple[Callable[..., None], Callable[..., str | None]]:
    """An agent module's `run` (the whole hook process) and `handle` (one event) for its
    Agent: what `mem hook NAME` calls, and the tests."""
    def run_it(settings_factory: Any, stdin: BinaryIO | None = None,
               stdout: TextIO | None = None) -> None:
        run(agent, settings_factory, stdin, stdout)

    def handle_it(settings_factory: Any, stdin: str | bytes) -> str | None:
        return handle(agent, settings_factory, stdin)

    return run_it, handle_it


def handle(agent: Agent, settings_factory: Any, stdin: str | bytes) -> str | None:
    """Handle one hook call; return what to print on stdout (or None). Never raises."""
    event = "unknown"
    session: str | None = None
    settings: Settings | None = None
    try:
        settings = settings_factory()
        # A key command run from a hook must end well before the agent ends the hook.
        settings.values["key_command_timeout"] = min(
            float(settings.values.get("key_command_timeout") or HOOK_KEY_COMMAND_TIMEOUT),
            HOOK_KEY_COMMAND_TIMEOUT)
        if len(stdin) > MAX_STDIN:
            log(settings, agent.name, event,
                f"ignored: stdin is larger than {MAX_STDIN >> 20} MiB")
            return None
        if isinstance(stdin, bytes):
            try:
                stdin = stdin.decode()
            except UnicodeDecodeError:
                log(settings, agent.name, event, "ignored: stdin is not UTF-8 text")
                return None
        payload = json.loads(stdin) if stdin.strip() else None
        if not isinstance(payload, dict):
            log(settings, agent.name, event, "ignored: stdin is not a hook JSON object")
            return None
        event = shown(str(payload.get("hook_event_name", "unknown")), 40)
        raw_session = payload.get("session_id")
        session = raw_session if isinstance(raw_session, str) and raw_session else None
        cwd = payload.get("cwd")
        cwd = cwd if isinstance(cwd, str) and os.path.isabs(cwd) else None
        if event in agent.brief_events:
            return _session_start(agent, settings, event, session, cwd)
        if event in agent.ingest_events:
            _spawn_ingest(agent, settings, payload, event, session)
            return None
        log(settings, agent.name, event, "ignored: not an event mem handles", session)
        return None
    except MemError as exc:
        log(settings, agent.name, event, f"failed ({type(exc).__name__}, exit "
            f"{exc.exit_code}): {exc.message}", session)
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        log(settings, agent.name, event, f"failed: {type(exc).__name__} at "
            f"{Path(where.filename).name}:{where.lineno}", session)
    return None


def _session_start(agent: Agent, settings: Settings, event: str,
                   session: str | None, cwd: str | None) -> str | None:
    from memvault.ops.brief import build
    from memvault.ops.projects import working_project
    from memvault.text.tokens import estimate
    from memvault.vault.vault import Vault

    skipped: list[str] = []
    vault = Vault(settings, actor=actor(agent.name, event))
    # The session's project first: its git work tree, keyed (never the path). A cwd that
    # names no directory (deleted, too long, a NUL) gives the brief without a project.
    prefer = working_project(vault, cwd) if cwd else None
    # The hook's limit bounds the brief itself, so the brief chooses what gives way (a
    # summariser's entries before the user's own), not a cut of its last lines.
    # `brief.max_tokens` bounds what the agent receives: the frame (and the note of a
    # cut, when the hook's room may make one) take their share of it.
    room = frame_room() - len(CUT_NOTE)
    wanted, most = int(settings.values["brief_max_chars"]), settings.values["brief_max_entries"]
    tokens = settings.brief_max_tokens - frame_tokens() \
        - (estimate(CUT_NOTE) if wanted > room else 0)
    brief = build(vault, most, min(wanted, room), skipped.append, prefer,
                  max_tokens=max(0, tokens))
    for problem in skipped:  # file names, ids and reasons: never content
        log(settings, agent.name, event, f"brief skipped {problem}", session)
    text = brief.brief
    if text and wanted > room and brief.limited_by == "chars":
        text = text.rstrip("\n") + CUT_NOTE  # the hook's limit left entries out: say so
    context = frame(text) if text else ""
    limit = {"entries": "entry", "tokens": "token", "chars": "character"}.get(
        brief.limited_by or "")
    cut = f", {brief.entry_count - brief.brief_count} left out by the {limit} limit" \
        if limit else ""
    log(settings, agent.name, event, f"brief with {brief.brief_count} entries, "
        f"~{estimate(context)} tokens{cut}", session)
    return json.dumps(agent.answer(event, context)) if context else None


def _spawn_ingest(agent: Agent, settings: Settings, payload: dict[str, Any], event: str,
                  session: str | None) -> None:
    path = payload.get("transcript_path")
    if (not isinstance(path, str) or not path) and agent.transcript is not None:
        path = agent.transcript(payload)
    if not isinstance(path, str) or not path:
        log(settings, agent.name, event, "ignored: no transcript_path", session)
        return
    problem = transcript_problem(path)
    if problem:
        log(settings, agent.name, event, f"ignored: {problem}", session)
        return
    # Options in their --name=value form, and `--` before the path: a path or a session id
    # that starts with "-" (`--scan=/`) is a value, never an option.
    argv = [*mem_command(), "ingest", f"--format={agent.ingest_format}", "--quiet",
            "--embed-now",
            f"--vault={settings.vault}", f"--org={settings.org}", f"--user={settings.user}"]
    if settings.key_file is not None:  # the hook's own --key-file: the agent's env lacks it
        argv.append(f"--key-file={settings.key_file}")
    name = session_name(session) if session and agent.one_session else None
    if name:
        # The agent's id made a valid name (a path, NUL or 200 characters are not), as a
        # scan of the same transcript would name it: its session is found under one name.
        argv.append(f"--session={name}")
    cwd = payload.get("cwd")
    if agent.one_session and isinstance(cwd, str) and os.path.isabs(cwd) and \
            os.path.isdir(cwd):
        argv.append(f"--project={cwd}")  # the ingest tags the messages with its keyed id
    if settings.sync["auto"] and settings.sync["remote"]:
        argv.append("--then-sync")  # in this background child, never the hook's time
    argv += ["--", path]
    env = {**os.environ, "MEM_ACTOR": actor(agent.name, event),  # its audit entries
           LOG_STAMP_ENV: _stamp(agent.name, event, session),  # its lines in the log
           "MEM_LOCK_TIMEOUT": str(max(settings.lock_timeout, BACKGROUND_LOCK_WAIT_S))}
    fsio.ensure_dir(settings.log_dir)
    with open(settings.log_dir / LOG_FILE, "ab") as errors:  # its lines land here, stamped
        subprocess.Popen(  # noqa: S603 - mem itself, argv list, no shell
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
            env=env, start_new_session=True, close_fds=True,
        )
    named = f" as session {name}" if name and name != session else ""
    log(settings, agent.name, event, f"ingest started in the background{named}", session)


def transcript_problem(path: str) -> str | None:
    """Why `path` is not handed to the background ingest, or None. Only a regular file of
    at most MAX_TRANSCRIPT bytes is: /dev/zero would be read until memory runs out and a
    FIFO would block the ingest for ever (it checks again when it opens the file: the
    path may change in between)."""
    where = shown(path, 200)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"no transcript at {where}"
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        return f"cannot read the transcript at {where}: " \
            f"{getattr(exc, 'strerror', None) or 'invalid path'}"
    if not stat.S_ISREG(st.st_mode):
        return f"the transcript at {where} is not a regular file"
    if st.st_size > MAX_TRANSCRIPT:
        return f"the transcript at {where} is larger than {MAX_TRANSCRIPT >> 20} MiB"
    return None


def shown(text: str, limit: int) -> str:
    """Text as one log line shows it: control characters replaced, length bounded."""
    flat = "".join(c if c.isprintable() else "?" for c in text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# --- editing an agent's settings files ------------------------------------------------------


def shell_line(argv: list[str], env: tuple[tuple[str, str], ...] = ()) -> str:
    """An argv as one shell command line, for agents whose hooks take only a string;
    `env` as assignments before it (NAME=value, the value quoted)."""
    return " ".join([*(f"{name}={shlex.quote(value)}" for name, value in env),
                     *(shlex.quote(part) for part in argv)])


def load_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON settings file as a mapping ({} when absent); UsageError when it is not one,
    before anything is changed."""
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text() or "{}")
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not valid JSON ({exc}); fix it first, nothing was "
                         "changed") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("hooks", {}), dict) \
            or not isinstance(doc.get("mcpServers", {}), dict):
        raise UsageError(f"{path} does not look like {what} settings; nothing was changed")
    return doc


def backup_of(path: Path) -> Path:
    """A new backup name beside `path`: two changes in one second keep the earlier one."""
    stem = f"{path.name}.mem-backup-{time.strftime('%Y%m%d%H%M%S')}"
    candidate = path.with_name(stem)
    n = 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{stem}-{n}")
    return candidate


def save_bytes(path: Path, data: bytes, before: bytes | None) -> str | None:
    """Write a settings file atomically, after a backup of what it held; return the
    backup's path. A file that is a symlink (dotfiles kept in a repository) is written
    through: the link stays, its target changes."""
    path = Path(os.path.realpath(path))
    backup = None
    if before is not None:
        backup_path = backup_of(path)
        fsio.atomic_write(backup_path, before)
        backup = str(backup_path)
    fsio.ensure_dir(path.parent)
    fsio.atomic_write(path, data)
    return backup


def save_json(path: Path, doc: dict[str, Any], before: bytes | None) -> str | None:
    return save_bytes(path, (json.dumps(doc, indent=2) + "\n").encode(), before)


# What a hook entry of mem's is: exactly a command line mem writes, after parsing. Anything
# else (a wrapper such as `check && mem hook codex`, a command that only mentions mem) is
# another tool's, left as it is.
PINNED_ENV = frozenset({"MEM_CONFIG_DIR", "MEM_LOG_DIR", "MEM_KEY_COMMAND", "MEM_KEY_SOURCE"})
PINNED_FLAGS = ("--vault=", "--org=", "--user=", "--key-file=")


def _split_env(argv: list[str]) -> tuple[tuple[tuple[str, str], ...], list[str]]:
    """Leading assignments of mem's own variables, and the rest of argv."""
    env: list[tuple[str, str]] = []
    for i, part in enumerate(argv):
        name, eq, value = part.partition("=")
        if not eq or name not in PINNED_ENV:
            return tuple(env), argv[i:]
        env.append((name, value))
    return tuple(env), []


def is_mem_hook_argv(argv: list[str], agent: str) -> bool:
    """Whether `argv` is `[MEM_*=value ...] mem hook AGENT [--vault=... ...]`, with mem as
    any path to the `mem` or `memvault` script or as `python -m memvault`."""
    rest = _split_env(argv)[1]
    if not rest:
        return False
    name = os.path.basename(rest[0])
    if name in ("mem", "memvault"):
        rest = rest[1:]
    elif name.startswith("python") and rest[1:3] == ["-m", "memvault"]:
        rest = rest[3:]
    else:
        return False
    return rest[:2] == ["hook", agent] and all(a.startswith(PINNED_FLAGS) for a in rest[2:])


def hook_argv(hook: dict[str, Any]) -> list[str]:
    """The command line of one of mem's handlers (exec form, or a shell line without
    the variables before it)."""
    command, args = str(hook.get("command", "")), hook.get("args")
    if isinstance(args, list):
        return [command, *map(str, args)]
    try:
        return _split_env(shlex.split(command))[1]
    except ValueError:
        return []


def scoped(scope: str, explicit: Path | None, user: Callable[[], Path],
           project: Callable[[], Path]) -> Path:
    """An agent's settings file for a scope (`explicit` when given); the paths are made
    only when asked for, so the home and the folder are read at that moment."""
    if explicit is not None:
        return explicit
    if scope == "user":
        return user()
    if scope == "project":
        return project()
    raise UsageError(f"unknown scope {scope!r}: use user or project")


def hook_owner(agent: str) -> Callable[[Any], bool]:
    """The test for mem's own hook handlers of `agent`: exec form (`command` and `args`)
    or a shell line that is exactly what shell_line() writes (a line that quotes or
    expands anything differently, `$(...)` included, is not mem's)."""
    def ours(hook: Any) -> bool:
        if not isinstance(hook, dict) or hook.get("type", "command") != "command":
            return False
        command, args = hook.get("command"), hook.get("args")
        if not isinstance(command, str):
            return False
        if args is not None:
            return isinstance(args, list) and all(isinstance(a, str) for a in args) \
                and not _split_env([command])[0] and is_mem_hook_argv([command, *args], agent)
        try:
            argv = shlex.split(command)
        except ValueError:
            return False
        env, rest = _split_env(argv)
        return command == shell_line(rest, env) and is_mem_hook_argv(argv, agent)
    return ours


def _handlers(group: Any) -> list[Any] | None:
    """A matcher group's handler list, or None when it is not one mem can read."""
    if isinstance(group, dict) and isinstance(group.get("hooks"), list):
        return group["hooks"]  # type: ignore[no-any-return]
    return None


def merge_hooks(path: Path, doc: dict[str, Any], entries: dict[str, dict[str, Any]],
                ours: Callable[[Any], bool]) -> list[str]:
    """Put one entry per event into `doc["hooks"]` (Claude Code's shape, which Codex and
    Gemini CLI share: event -> [{matcher?, hooks: [handler]}]): an entry of ours is
    replaced where it stands (its group and its neighbours kept), further copies removed;
    without one, a group of its own is added. Every other handler, group and key stays as
    it was. Returns the events changed."""
    if not entries:
        return []
    hooks = doc.setdefault("hooks", {})
    added = []
    for event, entry in entries.items():
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise UsageError(f"{path}: hooks.{event} is not a list; nothing was changed")
        places = [(g, i) for g in groups if (handlers := _handlers(g)) is not None
                  for i, h in enumerate(handlers) if ours(h)]
        if len(places) == 1 and places[0][0]["hooks"][places[0][1]] == entry:
            continue
        if not places:
            groups.append({"hooks": [entry]})
        else:
            first, index = places[0]
            first["hooks"][index] = entry
            for group, _ in places[1:]:
                group["hooks"] = [h for h in group["hooks"] if h is entry or not ours(h)]
            groups[:] = [g for g in groups if g is first or not any(g is p for p, _ in places)
                         or g["hooks"]]
        added.append(event)
    return added


def remove_hooks(doc: dict[str, Any], ours: Callable[[Any], bool]) -> list[str]:
    """Take every entry of ours out of `doc["hooks"]`; a group, an event or `hooks` itself
    goes only when taking ours out emptied it. Returns the events changed."""
    hooks = doc.get("hooks")
    if not isinstance(hooks, dict):
        return []
    removed = []
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            handlers = _handlers(group)
            if handlers is not None and any(ours(h) for h in handlers):
                removed.append(event)
                group["hooks"] = [h for h in handlers if not ours(h)]
                if not group["hooks"]:
                    continue
            kept.append(group)
        if event in removed:
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
    if removed and not hooks:
        del doc["hooks"]
    return sorted(set(removed))


def set_server(doc: dict[str, Any], key: str, entry: dict[str, Any]) -> bool:
    """Put mem's MCP server under `doc[key]["mem"]`; False when it is there already."""
    servers = doc.setdefault(key, {})
    if servers.get("mem") == entry:
        return False
    servers["mem"] = entry
    return True


def install_json(path: Path, what: str, entries: dict[str, dict[str, Any]],
                 ours: Callable[[Any], bool],
                 server: tuple[str, dict[str, Any]] | None = None,
                 dry_run: bool = False) -> HookInstallResult:
    """Merge the hooks (and the MCP server) into a JSON settings file, idempotently,
    keeping a backup of what it held; `dry_run`: say what would change, write nothing."""
    doc = load_json(path, what)
    before = path.read_bytes() if path.exists() else None
    changed = merge_hooks(path, doc, entries, ours)
    if server is not None and set_server(doc, server[0], server[1]):
        changed.append("mcp")
    if not changed:
        return HookInstallResult(str(path), False, (), None)
    backup = None if dry_run else save_json(path, doc, before)
    return HookInstallResult(str(path), True, tuple(changed), backup)


def uninstall_json(path: Path, what: str, ours: Callable[[Any], bool],
                   server_key: str | None = None, dry_run: bool = False
                   ) -> HookInstallResult:
    doc = load_json(path, what)
    if not path.exists():
        return HookInstallResult(str(path), False, (), None)
    before = path.read_bytes()
    removed = remove_hooks(doc, ours)
    if server_key is not None and "mem" in doc.get(server_key, {}):
        del doc[server_key]["mem"]
        if not doc[server_key]:
            del doc[server_key]
        removed.append("mcp")
    if not removed:
        return HookInstallResult(str(path), False, (), None)
    backup = None if dry_run else save_json(path, doc, before)
    return HookInstallResult(str(path), True, tuple(removed), backup)
