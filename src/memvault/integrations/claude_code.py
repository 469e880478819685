"""Claude Code: the hook handler and the settings.json installer.

A hook must never slow down or break the agent: it always exits 0, answers SessionStart
from the vault directly, hands transcript ingestion to a detached process, and logs its
failures (never content) to a file under the platform's log directory.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess  # noqa: S404 - runs mem itself, never a shell
import sys
import time
import traceback
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from memvault.config import Settings
from memvault.errors import MemError, UsageError
from memvault.model.results import HookInstallResult
from memvault.storage import fsio

EVENTS = ("SessionStart", "SessionEnd", "PreCompact")
HOOK_TIMEOUT_S = 10
MARKER = "hook claude-code"
LOG_FILE = "hooks.log"
MAX_STDIN = 1 << 20
# MEM_KEY_COMMAND in a hook: well inside the time Claude Code gives the hook, so that a
# hanging password manager costs the agent this long, never the hook's whole budget.
HOOK_KEY_COMMAND_TIMEOUT = HOOK_TIMEOUT_S / 2
# The largest transcript handed to the background ingest: ops/ingest.py reads a Claude
# Code transcript whole, up to this size.
MAX_TRANSCRIPT = 256 << 20


def log(settings: Settings | None, event: str, outcome: str) -> None:
    """One line per hook run: time, event, outcome. Outcomes never hold memory content."""
    try:
        if settings is not None:
            directory = settings.log_dir
        else:  # the settings themselves failed: still never the agent's working directory
            import platformdirs

            directory = Path(os.environ.get("MEM_LOG_DIR") or platformdirs.user_log_dir("mem"))
        fsio.ensure_dir(directory)
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} claude-code {event}: {outcome}\n"
        fsio.append_line(directory / LOG_FILE, line.encode(), sync=False)
    except Exception:  # noqa: S110 - logging must never break the agent either
        pass


def mem_command() -> list[str]:
    """How to run this same mem again (the installed script, or `python -m memvault`)."""
    script = Path(sys.argv[0])
    if script.name in ("mem", "memvault") and script.exists():
        return [str(script.resolve())]
    return [sys.executable, "-m", "memvault"]


def actor(event: str) -> str:
    """How the audit log names a hook run."""
    return f"hook:claude-code:{event}"


def run(settings_factory: Any, stdin: BinaryIO | None = None,
        stdout: TextIO | None = None) -> None:
    """The whole hook run, from stdin to stdout: reads at most MAX_STDIN + 1 bytes (a
    larger payload is refused, never read whole), answers, and never raises, whatever
    stdin and stdout are (closed, a reader gone): a hook exits 0."""
    data = read_stdin(stdin if stdin is not None else _std_stream("stdin"))
    output = handle(settings_factory, data)
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


def handle(settings_factory: Any, stdin: str | bytes) -> str | None:
    """Handle one hook call; return what to print on stdout (or None). Never raises."""
    event = "unknown"
    settings: Settings | None = None
    try:
        settings = settings_factory()
        # A key command run from a hook must end well before Claude Code ends the hook.
        settings.values["key_command_timeout"] = min(
            float(settings.values.get("key_command_timeout") or HOOK_KEY_COMMAND_TIMEOUT),
            HOOK_KEY_COMMAND_TIMEOUT)
        if len(stdin) > MAX_STDIN:
            log(settings, event, f"ignored: stdin is larger than {MAX_STDIN >> 20} MiB")
            return None
        if isinstance(stdin, bytes):
            try:
                stdin = stdin.decode()
            except UnicodeDecodeError:
                log(settings, event, "ignored: stdin is not UTF-8 text")
                return None
        payload = json.loads(stdin) if stdin.strip() else None
        if not isinstance(payload, dict):
            log(settings, event, "ignored: stdin is not a hook JSON object")
            return None
        event = str(payload.get("hook_event_name", "unknown"))[:40]
        if event == "SessionStart":
            return _session_start(settings)
        if event in ("SessionEnd", "PreCompact"):
            _spawn_ingest(settings, payload, event)
            return None  # PreCompact's stdout would be fed into the compaction prompt
        log(settings, event, "ignored: not an event mem handles")
        return None
    except MemError as exc:
        log(settings, event, f"failed ({type(exc).__name__}, exit {exc.exit_code}): "
            f"{exc.message}")
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        log(settings, event, f"failed: {type(exc).__name__} at "
            f"{Path(where.filename).name}:{where.lineno}")
    return None


def _session_start(settings: Settings) -> str | None:
    from memvault.ops.brief import build
    from memvault.vault.vault import Vault

    skipped: list[str] = []
    brief = build(Vault(settings, actor=actor("SessionStart")),
                  settings.values["brief_max_entries"], settings.values["brief_max_chars"],
                  skipped.append)
    for problem in skipped:  # file names, ids and reasons: never content
        log(settings, "SessionStart", f"brief skipped {problem}")
    log(settings, "SessionStart", f"brief with {brief.brief_count} entries")
    if not brief.brief:
        return None
    out = {"hookSpecificOutput": {"hookEventName": "SessionStart",
                                  "additionalContext": brief.brief}}
    return json.dumps(out)


def _spawn_ingest(settings: Settings, payload: dict[str, Any], event: str) -> None:
    path = payload.get("transcript_path")
    if not isinstance(path, str) or not path:
        log(settings, event, "ignored: no transcript_path")
        return
    problem = transcript_problem(path)
    if problem:
        log(settings, event, f"ignored: {problem}")
        return
    # Options in their --name=value form, and `--` before the path: a path or a session id
    # that starts with "-" (`--scan=/`) is a value, never an option.
    argv = [*mem_command(), "ingest", "--format=claude-code", "--quiet",
            f"--vault={settings.vault}", f"--org={settings.org}", f"--user={settings.user}"]
    session = payload.get("session_id")
    if isinstance(session, str) and session:
        argv.append(f"--session={session}")
    argv += ["--", path]
    env = {**os.environ, "MEM_ACTOR": actor(event)}  # the child's audit entries name us
    fsio.ensure_dir(settings.log_dir)
    with open(settings.log_dir / LOG_FILE, "ab") as errors:  # its one-line errors land here
        subprocess.Popen(  # noqa: S603 - mem itself, argv list, no shell
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
            env=env, start_new_session=True, close_fds=True,
        )
    log(settings, event, "ingest started in the background")


def transcript_problem(path: str) -> str | None:
    """Why `path` is not handed to the background ingest, or None. Only a regular file of
    at most MAX_TRANSCRIPT bytes is: /dev/zero would be read until memory runs out and a
    FIFO would block the ingest for ever (it checks again when it opens the file: the
    path may change in between)."""
    shown = _shown(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"no transcript at {shown}"
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        return f"cannot read the transcript at {shown}: " \
            f"{getattr(exc, 'strerror', None) or 'invalid path'}"
    if not stat.S_ISREG(st.st_mode):
        return f"the transcript at {shown} is not a regular file"
    if st.st_size > MAX_TRANSCRIPT:
        return f"the transcript at {shown} is larger than {MAX_TRANSCRIPT >> 20} MiB"
    return None


def _shown(path: str, limit: int = 200) -> str:
    """A path as one log line shows it: control characters replaced, length bounded."""
    flat = "".join(c if c.isprintable() else "?" for c in path)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# --- installing into Claude Code's settings.json ---------------------------------------


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    if explicit is not None:
        return explicit
    if scope == "user":
        base = os.environ.get("CLAUDE_CONFIG_DIR") or str(Path.home() / ".claude")
        return Path(base) / "settings.json"
    if scope == "project":
        return Path.cwd() / ".claude" / "settings.json"
    raise UsageError(f"unknown scope {scope!r}: use user or project")


def _ours(hook: Any) -> bool:
    return isinstance(hook, dict) and MARKER in str(hook.get("command", ""))


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text() or "{}")
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not valid JSON ({exc}); fix it first, nothing was "
                         "changed") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("hooks", {}), dict):
        raise UsageError(f"{path} does not look like Claude Code settings; nothing was changed")
    return doc


def _save(path: Path, doc: dict[str, Any], before: bytes | None) -> str | None:
    # A settings.json that is a symlink (dotfiles kept in a repository) is written
    # through: the link stays, its target changes.
    path = Path(os.path.realpath(path))
    backup = None
    if before is not None:
        stem = f"{path.name}.mem-backup-{time.strftime('%Y%m%d%H%M%S')}"
        backup_path = path.with_name(stem)
        n = 1
        while backup_path.exists():  # two changes in one second: keep the earlier backup
            n += 1
            backup_path = path.with_name(f"{stem}-{n}")
        fsio.atomic_write(backup_path, before)
        backup = str(backup_path)
    fsio.ensure_dir(path.parent)
    fsio.atomic_write(path, (json.dumps(doc, indent=2) + "\n").encode())
    return backup


def install(path: Path) -> HookInstallResult:
    """Merge mem's three hooks into settings.json; running it twice changes nothing."""
    doc = _load(path)
    before = path.read_bytes() if path.exists() else None
    command = " ".join(shlex.quote(part) for part in mem_command()) + " " + MARKER
    hooks = doc.setdefault("hooks", {})
    added = []
    for event in EVENTS:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise UsageError(f"{path}: hooks.{event} is not a list; nothing was changed")
        present = [h for g in groups if isinstance(g, dict)
                   for h in g.get("hooks", []) if _ours(h)]
        if present and all(h.get("command") == command for h in present):
            continue
        for group in groups:  # replace an older mem entry (moved install) in place
            if isinstance(group, dict):
                group["hooks"] = [h for h in group.get("hooks", []) if not _ours(h)]
        groups[:] = [g for g in groups if not isinstance(g, dict) or g.get("hooks")]
        groups.append({"hooks": [{"type": "command", "command": command,
                                  "timeout": HOOK_TIMEOUT_S}]})
        added.append(event)
    if not added:
        return HookInstallResult(str(path), False, (), None)
    backup = _save(path, doc, before)
    return HookInstallResult(str(path), True, tuple(added), backup)


def uninstall(path: Path) -> HookInstallResult:
    doc = _load(path)
    if not path.exists():
        return HookInstallResult(str(path), False, (), None)
    before = path.read_bytes()
    hooks = doc.get("hooks", {})
    removed = []
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            if isinstance(group, dict) and any(_ours(h) for h in group.get("hooks", [])):
                removed.append(event)
                group = {**group, "hooks": [h for h in group["hooks"] if not _ours(h)]}
                if not group["hooks"]:
                    continue
            kept.append(group)
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if not removed:
        return HookInstallResult(str(path), False, (), None)
    if not hooks:
        doc.pop("hooks", None)
    backup = _save(path, doc, before)
    return HookInstallResult(str(path), True, tuple(sorted(set(removed))), backup)
