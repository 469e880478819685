"""Hostile inputs and files (an outside attack, fixed at the root): whatever a transcript
path, a hook's stdin, a key command, a file planted in the vault, a config file or a
damaged log holds, mem answers with its documented exit code and one line, in bounded
time and memory, and a hook exits 0."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.config import resolve
from memvault.integrations import claude_code as hooks
from memvault.integrations import hookbase
from memvault.model.location import session_name
from memvault.model.records import CLAUDE_MD
from memvault.ops import remember
from memvault.vault.vault import Vault
from tests.conftest import mem, one_error_line
from tests.test_hooks import background_ingests, wait_background

MEM = Path(sys.executable).parent / "mem"
FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
CLAUDE_SID = "5f0c2a8e-3b1d-4c6f-9a7e-2d8b1c4e6f00"


# --- helpers ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Hooks log under tmp_path; no background ingest outlives its test."""
    path = tmp_path / "logs"
    monkeypatch.setenv("MEM_LOG_DIR", str(path))
    yield path
    try:
        wait_background(tmp_path, timeout=10)
    except AssertionError:
        pass
    for pid in background_ingests(tmp_path):
        os.kill(pid, signal.SIGKILL)


def log_text(log_dir: Path) -> str:
    path = log_dir / hookbase.LOG_FILE
    return path.read_text() if path.exists() else ""


def run(*args: str, stdin: bytes = b"", timeout: float = 20, cwd: Path | None = None,
        **env: str) -> subprocess.CompletedProcess[bytes]:
    """The installed `mem`, as a separate process with a time limit: what used to hang
    fails the test (TimeoutExpired) instead of hanging the suite."""
    return subprocess.run([str(MEM), *args], input=stdin, capture_output=True,
                          env={**os.environ, **env}, timeout=timeout, check=False, cwd=cwd)


def hook(payload: object, timeout: float = 20, cwd: Path | None = None,
         **env: str) -> tuple[subprocess.CompletedProcess[bytes], float]:
    started = time.perf_counter()
    result = run("hook", "claude-code", stdin=json.dumps(payload).encode(), timeout=timeout,
                 cwd=cwd, **env)
    return result, time.perf_counter() - started


def error_line(result: subprocess.CompletedProcess[bytes]) -> str:
    return one_error_line(result.stderr.decode())


def dead(pid: int) -> bool:
    """Gone, or a zombie waiting for a parent that is not ours to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def wait_dead(pid: int, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while not dead(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def write_config(config_dir: Path, text: str) -> None:
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.yaml").write_text(text)


def messages(script_runner: ScriptRunner, session: str) -> int:
    result = mem(script_runner, "list", "--session", session, "--type", "message",
                 "--limit", "1000", "--json")
    assert result.returncode == 0, result.stderr
    return len(json.loads(result.stdout)["records"])


# --- 8. the transcript a SessionEnd / PreCompact hook hands to the background ingest -------


@pytest.mark.script_launch_mode("subprocess")  # the hook and its detached ingest
@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_hook_hands_only_a_regular_transcript_to_the_background_ingest(
        vault: Vault, tmp_path: Path, log_dir: Path, kind: str) -> None:
    if kind == "fifo":
        path = tmp_path / "t.jsonl"
        os.mkfifo(path)  # an ingest that opened it would wait for a writer for ever
    elif kind == "device":
        path = Path("/dev/zero")  # an ingest that read it would fill memory
    else:
        path = tmp_path / "folder.jsonl"
        path.mkdir()
    result, _ = hook({"hook_event_name": "SessionEnd", "session_id": "s1",
                      "transcript_path": str(path), "reason": "exit"})
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    text = log_text(log_dir)
    assert f"the transcript at {path} is not a regular file" in text, text
    assert "ingest started" not in text
    assert background_ingests(tmp_path) == []


@pytest.mark.script_launch_mode("subprocess")  # the hook and its detached ingest
def test_a_transcript_path_that_looks_like_an_option_is_ingested_as_a_path(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, log_dir: Path) -> None:
    # Relative to the hook's working directory: a folder named "--scan=x".
    folder = tmp_path / "--scan=x"
    folder.mkdir()
    shutil.copy(FIXTURES / "claude-code.jsonl", folder / "t.jsonl")
    result, _ = hook({"hook_event_name": "SessionEnd", "session_id": CLAUDE_SID,
                      "transcript_path": "--scan=x/t.jsonl", "reason": "exit"}, cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    wait_background(tmp_path)
    assert messages(script_runner, CLAUDE_SID) == 13, log_text(log_dir)


def test_the_background_ingest_argv_ends_options_before_the_path(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []
    monkeypatch.setattr(hookbase.subprocess, "Popen", lambda argv, **_: started.append(argv))
    path = tmp_path / "-s.jsonl"
    path.write_text("{}\n")
    hooks.handle(resolve, json.dumps({"hook_event_name": "PreCompact", "transcript_path":
                                      str(path), "session_id": "--scan=/"}))
    (argv,) = started
    assert argv[-2:] == ["--", str(path)]
    # Not a valid name: passed as the name it maps to, a value, never an option.
    assert f"--session={session_name('--scan=/')}" in argv and "--scan=/" not in argv


def test_a_transcript_larger_than_ingest_reads_is_not_handed_over(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_dir: Path) -> None:
    monkeypatch.setattr(hookbase, "MAX_TRANSCRIPT", 10)
    started: list[list[str]] = []
    monkeypatch.setattr(hookbase.subprocess, "Popen", lambda argv, **_: started.append(argv))
    path = tmp_path / "big.jsonl"
    path.write_text("x" * 11)
    hooks.handle(resolve, json.dumps({"hook_event_name": "SessionEnd",
                                      "transcript_path": str(path)}))
    assert started == []
    assert "is larger than" in log_text(log_dir)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_ingest_refuses_a_transcript_that_is_not_a_regular_file(
        vault: Vault, tmp_path: Path, kind: str) -> None:
    path = Path("/dev/zero") if kind == "device" else tmp_path / "t.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    result = run("ingest", str(path))  # the FIFO used to block, /dev/zero to read 256 MiB
    assert result.returncode == 65
    assert "is not a regular file" in error_line(result)


# --- 9. the SessionStart hook ----------------------------------------------------------------


def hanging_key_command(tmp_path: Path) -> tuple[str, Path]:
    """A key command that starts a child and never answers; it writes both pids."""
    script = tmp_path / "hang.py"
    pids = tmp_path / "pids"
    script.write_text(
        "import subprocess, sys, time\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{child.pid}} ' + str(__import__('os').getpid()))\n"
        "time.sleep(300)\n")
    return f"{sys.executable} {script}", pids


def kill_all(pids_file: Path) -> list[int]:
    pids = [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


@pytest.mark.slow  # the hook's key-command limit is HOOK_KEY_COMMAND_TIMEOUT (5 s)
@pytest.mark.script_launch_mode("subprocess")  # the hook's exit code and time
@pytest.mark.long  # a fault run: `make test-long` and CI
def test_a_hanging_key_command_costs_a_hook_less_than_its_budget(
        vault: Vault, tmp_path: Path, log_dir: Path) -> None:
    command, pids = hanging_key_command(tmp_path)
    try:
        result, _ = hook({"hook_event_name": "SessionStart", "source": "startup"},
                         timeout=hooks.HOOK_TIMEOUT_S + 10, MEM_KEY_COMMAND=command)
        # The hook answers (the run above is bounded) because the key command was given
        # up at its own limit, well inside the agent's: the log says which limit ended it.
        assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
        assert f"MEM_KEY_COMMAND did not answer within {hookbase.HOOK_KEY_COMMAND_TIMEOUT:g}s" \
            in log_text(log_dir)
        child, command_pid = (int(p) for p in pids.read_text().split())
        assert wait_dead(command_pid) and wait_dead(child), "the key command's group lives on"
    finally:
        kill_all(pids)


def test_a_key_command_that_times_out_is_killed_with_its_children(
        vault: Vault, tmp_path: Path) -> None:
    command, pids = hanging_key_command(tmp_path)
    try:
        result = run("list", MEM_KEY_COMMAND=command, MEM_KEY_COMMAND_TIMEOUT="1")
        assert result.returncode == 78
        assert "did not answer within 1s" in error_line(result)
        child, command_pid = (int(p) for p in pids.read_text().split())
        assert wait_dead(command_pid) and wait_dead(child), "the key command's group lives on"
    finally:
        kill_all(pids)


def test_the_hook_reads_at_most_one_byte_past_its_stdin_limit(
        vault: Vault, log_dir: Path) -> None:
    class Endless(io.RawIOBase):
        given = 0

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            size = len(buffer)
            buffer[:size] = b" " * size
            self.given += size
            return size

    stdin = Endless()
    out = io.StringIO()
    hooks.run(resolve, stdin, out)  # type: ignore[arg-type]
    assert stdin.given <= hookbase.MAX_STDIN + 1
    assert out.getvalue() == ""
    assert "stdin is larger than 1 MiB" in log_text(log_dir)


def test_the_hook_answers_into_a_closed_or_abandoned_stdout_without_failing(
        script_runner: ScriptRunner, vault: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    assert mem(script_runner, "add", "Prefers tea", "--type", "preference").returncode == 0
    start = json.dumps({"hook_event_name": "SessionStart"}).encode()
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", None)  # Python started with fd 1 closed
        hooks.run(resolve, io.BytesIO(start))
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader went away
    with open(write_end, "w") as stdout:
        hooks.run(resolve, io.BytesIO(start), stdout)  # no BrokenPipeError
    out = io.StringIO()
    hooks.run(resolve, io.BytesIO(start), out)
    assert "Prefers tea" in json.loads(out.getvalue())["hookSpecificOutput"]["additionalContext"]


@pytest.mark.script_launch_mode("subprocess")  # the hook's exit code
@pytest.mark.parametrize("stdout", ["closed", "abandoned"])
def test_the_installed_hook_exits_0_whatever_its_stdout(
        script_runner: ScriptRunner, vault: Vault, stdout: str) -> None:
    assert mem(script_runner, "add", "Prefers tea", "--type", "preference").returncode == 0
    start = json.dumps({"hook_event_name": "SessionStart"}).encode()
    if stdout == "closed":
        proc = subprocess.run(f"exec {MEM} hook claude-code >&-", shell=True,  # noqa: S602
                              input=start, capture_output=False, stderr=subprocess.PIPE,
                              timeout=20, check=False)
    else:
        proc = subprocess.run(f"{MEM} hook claude-code | true", shell=True,  # noqa: S602
                              input=start, stderr=subprocess.PIPE, timeout=20, check=False,
                              executable="/bin/bash")
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr


@pytest.mark.parametrize("planted", ["session", "document", "key file", "config file"])
def test_a_fifo_planted_in_place_of_a_file_is_refused_without_blocking(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, config_dir: Path,
        tmp_path: Path, log_dir: Path, planted: str) -> None:
    assert mem(script_runner, "add", "Prefers tea", "--type", "preference").returncode == 0
    assert mem(script_runner, "add", "Works on billing", "--type", "fact").returncode == 0
    user = vault_dir / "default" / "alice"
    shutil.rmtree(user / "index")  # the next reader rebuilds it: it reads every file
    if planted == "session":
        os.mkfifo(user / "sessions" / "evil.jsonl")
        for command in (["list"], ["verify"], ["search", "tea"]):
            result = run(*command)
            assert result.returncode == 65, (command, result.stderr)
            assert "sessions/evil.jsonl is not a regular file" in error_line(result)
    elif planted == "document":
        (user / CLAUDE_MD).unlink()
        os.mkfifo(user / CLAUDE_MD)
        result = run("list")
        assert result.returncode == 65 and "CLAUDE.md" in error_line(result)
    elif planted == "key file":
        key = tmp_path / "key"
        os.mkfifo(key, 0o600)
        result = run("list", MEM_KEY_FILE=str(key))
        assert result.returncode == 78 and "is not a regular file" in error_line(result)
        return
    else:
        (config_dir / "config.yaml").unlink(missing_ok=True)
        os.mkfifo(config_dir / "config.yaml")
        result = run("list")
        assert result.returncode == 78 and "not a regular file" in error_line(result)
        return
    # The brief reads only the documents. `mem brief` says which one it cannot read; the
    # hook gives the agent what it can read, and logs the rest.
    brief = run("brief")
    if planted == "document":
        assert brief.returncode == 65 and "CLAUDE.md" in error_line(brief)
    else:
        assert brief.returncode == 0 and b"Prefers tea" in brief.stdout, brief.stderr
    result, _ = hook({"hook_event_name": "SessionStart"})
    assert result.returncode == 0
    assert "Prefers tea" in json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"]
    if planted == "document":
        assert "brief skipped CLAUDE.md" in log_text(log_dir)


@pytest.mark.script_launch_mode("subprocess")  # the hook's stdout
def test_one_damaged_entry_is_left_out_of_the_brief_and_logged(
        script_runner: ScriptRunner, vault: Vault, log_dir: Path) -> None:
    remember.add(vault, "Works on the billing service", "fact")
    doc = vault.store.read_doc(CLAUDE_MD)
    assert doc is not None
    good = doc["records"][0]
    doc["records"].append({**good, "memory_id": "01900000-0000-7000-8000-000000000001",
                           "content": "Damaged entry", "created_at": "long ago"})
    doc["records"].append({"memory_id": "01900000-0000-7000-8000-000000000002"})
    vault.store.write_doc(CLAUDE_MD, doc, vault.state().key_version)

    result = mem(script_runner, "brief", "--json")
    assert result.returncode == 0, result.stderr
    contents = [e["content"] for e in json.loads(result.stdout)["entries"]]
    assert contents == ["Works on the billing service"]
    started, _ = hook({"hook_event_name": "SessionStart"})
    brief = json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "Works on the billing service" in brief and "Damaged" not in brief
    text = log_text(log_dir)
    assert text.count("brief skipped CLAUDE.md record") == 2, text
    assert "long ago" not in text and "Damaged" not in text  # never content


def test_a_redaction_rule_that_can_backtrack_for_ever_is_refused_at_load(
        vault: Vault, config_dir: Path) -> None:
    write_config(config_dir, 'redaction:\n  rules:\n    - id: slow-rule\n'
                 '      pattern: "(a+)+$"\n      class: "redact:SLOW"\n')
    # Run, this rule would take 2^40 steps on this text, holding the user's lock.
    result = run("add", "a" * 40 + "!")
    assert result.returncode == 78
    line = error_line(result)
    assert "slow-rule" in line and "repeats a repetition" in line


def _user_lock_held(v: Vault) -> bool:
    """Whether some writer holds the user's lock now (a second open file description
    cannot take it, even in the same process)."""
    import fcntl

    if not v.layout.lock_path.exists():
        return False  # no writer has taken it yet
    fd = os.open(v.layout.lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def test_admission_never_runs_under_the_users_lock(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A redaction rule may be slow without being refused (a long text, a rule that is
    linear but costly): its time must not be spent holding the user's lock, where every
    other writer (a hook, an add) waits for it and then fails with exit 75. Every way in
    is screened before the lock: add, pref set, import, ingest of a new and of a grown
    transcript, and a scan."""
    from memvault.model.records import NewMessage
    from memvault.ops import ingest, portability, prefs
    from memvault.text import redact

    original, scans, users = redact.scan, [], [vault]

    def watched(text: str, config: Any, *rest: Any) -> Any:
        scans.append((text, any(_user_lock_held(v) for v in users)))
        return original(text, config, *rest)

    monkeypatch.setattr(redact, "scan", watched)
    remember.add(vault, "Prefers window seats", "preference")
    prefs.set_(vault, "editor", "vim")
    messages = [NewMessage(f"message number {i}", "user", f"m{i}") for i in range(3)]
    ingest.add_messages(vault, "s1", messages[:2])  # no admission: the library call
    ingest.ingest_text(vault, "\n".join(json.dumps(
        {"id": m.message_id, "role": m.role, "content": m.content}) for m in messages),
        None, "jsonl", session="s1")  # one new message
    ingest.ingest_text(vault, json.dumps({"id": "m0", "role": "user", "content":
                                          "message number 0, grown"}), None, "jsonl",
                       session="s1")  # one grown message
    folder = tmp_path / "scanned"
    folder.mkdir()
    (folder / "t.jsonl").write_text(json.dumps({"id": "x1", "role": "user",
                                                "content": "a scanned message"}) + "\n")
    ingest.scan_dir(vault, folder)
    buf = io.StringIO()
    portability.export(vault, buf, "json")
    bob = Vault(resolve(user="bob"))
    users.append(bob)
    portability.import_text(bob, buf.getvalue())
    texts = {text for text, _ in scans}
    for expected in ("Prefers window seats", "vim", "message number 2",
                     "message number 0, grown", "a scanned message"):
        assert sum(expected == t for t in texts) >= 1, (expected, texts)
    # The import screens every record again, for bob.
    assert sum(t == "Prefers window seats" for t, _ in scans) >= 2
    assert not [t for t, held in scans if held], scans


@pytest.mark.parametrize("pattern", [r"(\w+\s?)+$", r"(x{1,3})+y", r"((a+){2})+"])
def test_nested_repetition_is_refused_and_linear_patterns_are_not(pattern: str) -> None:
    from memvault.errors import ConfigError
    from memvault.text.redact import rule_from_config

    with pytest.raises(ConfigError, match="repeats a repetition"):
        rule_from_config({"id": "r", "pattern": pattern, "class": "redact:R"})
    for fine in (r"ACME-[0-9]{8}", r"(?:foo|bar)+baz", r"(\d{3}-)?\d{4}", r"(a++)+b"):
        rule_from_config({"id": "r", "pattern": fine, "class": "redact:R"})


# --- 11. the search snippet ------------------------------------------------------------------


@pytest.mark.slow
def test_the_snippet_of_a_megabyte_of_one_repeated_word_is_linear(tmp_path: Path) -> None:
    code = (
        "import time\n"
        "from memvault.index.keyed import Analyzer\n"
        "from memvault.ops.recall import snippet\n"
        "a = Analyzer(b'k' * 32)\n"
        "text = 'platypus ' * ((1 << 20) // 9)\n"
        "started = time.perf_counter()\n"
        "cut = snippet(a, text, a.query_terms('platypus'))\n"
        "print(time.perf_counter() - started, len(cut))\n")
    # Quadratic, this took hours (106 s for 195 KiB); linear, well under a second. The
    # time-out only guards against the first: speed itself is measured in bench/.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    _, length = done.stdout.split()
    assert 100 < int(length) < 200


# --- 12. documented exit codes, not "unexpected" ---------------------------------------------


# A million "lol"s from 60 of them: each level repeats the one before ten times.
BOMB = "redaction:\n  disable:\n" + "".join(
    [f"    - &b0 [{', '.join(['lol'] * 10)}]\n"]
    + [f"    - &b{i} [{', '.join([f'*b{i - 1}'] * 10)}]\n" for i in range(1, 6)])


@pytest.mark.parametrize(("text", "expected"), [
    ("redaction:\n  disable: &x [a]\n  rules: *x\n", "anchors and aliases"),
    pytest.param(BOMB, "anchors and aliases", marks=pytest.mark.long),
    ("lock_timeout: .nan\n", "lock_timeout"),
    ("lock_timeout: 1e400\n", "lock_timeout"),
    ("brief_max_entries: .inf\n", "brief_max_entries"),
    ("brief_max_entries: 2.5\n", "brief_max_entries"),
    ("brief_max_chars: 99999999999999999999999\n", "brief_max_chars"),
    ("brief_max_chars: true\n", "brief_max_chars"),
    ("key_command_timeout: -1\n", "invalid value -1 for key_command_timeout"),
    ("[" * 5000 + "]" * 5000 + "\n", "nested more than 32 levels deep"),
    ("a: " + "{b: " * 5000 + "1" + "}" * 5000 + "\n", "nested more than 32 levels deep"),
    ("".join(f"{'  ' * i}k{i}:\n" for i in range(40)) + "  " * 40 + "v: 1\n",
     "nested more than 32 levels deep"),
])
def test_a_hostile_config_file_is_a_config_error(
        script_runner: ScriptRunner, vault: Vault, config_dir: Path, text: str,
        expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEM_LOCK_TIMEOUT")  # the file's value, not the environment's
    write_config(config_dir, text)
    result = mem(script_runner, "add", "Prefers tea")
    assert result.returncode == 78, result.stderr
    assert expected in one_error_line(result.stderr)


@pytest.mark.parametrize(("name", "value"), [("MEM_LOCK_TIMEOUT", "nan"),
                                             ("MEM_LOCK_TIMEOUT", "inf"),
                                             ("MEM_LOCK_TIMEOUT", "1e400"),
                                             ("MEM_BRIEF_MAX_CHARS", "50")])
def test_a_number_out_of_range_in_the_environment_is_a_config_error(
        script_runner: ScriptRunner, vault: Vault, name: str, value: str) -> None:
    result = mem(script_runner, "list", **{name: value})
    assert result.returncode == 78
    assert name in one_error_line(result.stderr)


def test_an_unbalanced_quote_in_the_key_command_is_a_config_error(
        script_runner: ScriptRunner, vault: Vault) -> None:
    result = mem(script_runner, "list", MEM_KEY_COMMAND='echo "abc')
    assert result.returncode == 78
    assert "MEM_KEY_COMMAND cannot be parsed" in one_error_line(result.stderr)


@pytest.mark.script_launch_mode("subprocess")  # stdin as raw bytes
@pytest.mark.parametrize("command", [["add", "-"], ["ingest", "-", "--format", "jsonl"]])
def test_invalid_utf8_on_stdin_is_a_data_error(vault: Vault, command: list[str]) -> None:
    result = run(*command, stdin=b'{"role": "user", "content": "caf\xff"}\n')
    assert result.returncode == 65
    assert "stdin is not UTF-8 text" in error_line(result)


@pytest.mark.parametrize("target", [CLAUDE_MD, "keys/1.dek", "audit.jsonl"])
def test_a_folder_where_a_vault_file_belongs_is_a_data_error(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, target: str) -> None:
    assert mem(script_runner, "add", "Works on billing").returncode == 0
    path = vault_dir / "default" / "alice" / target
    path.unlink()
    path.mkdir()
    result = mem(script_runner, "add", "Prefers tea")
    assert result.returncode == 65, result.stderr
    assert "is a folder" in one_error_line(result.stderr)


def test_a_folder_where_the_key_file_belongs_is_a_config_error(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    folder = tmp_path / "key"
    folder.mkdir(mode=0o700)
    result = mem(script_runner, "list", "--key-file", str(folder))
    assert result.returncode == 78
    assert "is a folder" in one_error_line(result.stderr)


@pytest.mark.parametrize("garbage", [b"garbage\n", b'{"seq": "x"}\n', b"[1]\n",
                                     b'{"seq": 9, "mac": 5}\n', b"\xff\xfe\n"])
def test_a_garbage_last_audit_line_is_a_torn_tail(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, garbage: bytes) -> None:
    assert mem(script_runner, "add", "Works on billing").returncode == 0
    log = vault_dir / "default" / "alice" / "audit.jsonl"
    good = log.read_bytes()

    def damage() -> None:
        log.write_bytes(good + garbage)

    # Commands work (a read's own audit entry cuts it, as an append cuts a torn one).
    damage()
    assert mem(script_runner, "list").returncode == 0
    assert log.read_bytes().startswith(good) and garbage not in log.read_bytes()
    # `verify` reports it as a repairable warning, not an error; --repair cuts it.
    damage()
    checked = mem(script_runner, "verify", "--json")
    assert checked.returncode == 0, checked.stderr
    (problem,) = json.loads(checked.stdout)["problems"]
    assert problem["severity"] == "warning" and problem["repairable"]
    assert "unreadable last audit entry" in problem["problem"]
    damage()
    repaired = mem(script_runner, "verify", "--repair", "--json")
    assert repaired.returncode == 0, repaired.stderr
    assert garbage not in log.read_bytes()
    # The chain goes on from the last good entry: sound after a write.
    assert mem(script_runner, "add", "Prefers tea").returncode == 0
    after = mem(script_runner, "verify", "--json")
    assert json.loads(after.stdout)["problems"] == [], after.stdout
    assert json.loads(mem(script_runner, "audit", "--json").stdout)["chain_ok"]


def test_garbage_followed_by_an_entry_is_still_damage(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    assert mem(script_runner, "add", "Works on billing").returncode == 0
    log = vault_dir / "default" / "alice" / "audit.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join([*lines[:-1], b"garbage\n", lines[-1]]))
    result = mem(script_runner, "verify", "--json")
    assert result.returncode == 65
    problems = json.loads(result.stdout)["problems"]
    assert any(p["problem"] == "unreadable audit entry" and p["severity"] == "error"
               for p in problems), problems


def test_a_full_disk_during_reindex_is_a_storage_error(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tantivy

    assert mem(script_runner, "add", "Works on billing").returncode == 0
    real = tantivy.Index

    class Full:
        """Tantivy's Index on a full disk: a new index cannot be created."""

        open = staticmethod(real.open)

        def __new__(cls, schema: Any, path: str | None = None, **kwargs: Any) -> Any:
            if path is not None and ".new-" in path:  # the index built beside the old one
                raise ValueError("An IO error occurred: 'No space left on device (os error "
                                 f"28) at path \"{path}/.tmpXWB037\"'")
            return real(schema, path=path, **kwargs)

    monkeypatch.setattr(tantivy, "Index", Full)
    result = mem(script_runner, "reindex")
    assert result.returncode == 74
    line = one_error_line(result.stderr)
    assert "No space left on device" in line and "unexpected" not in line
    assert not list((vault_dir / "default" / "alice").glob("index.new-*"))


# --- 13. memory content out of argv ------------------------------------------------------


def test_every_command_that_takes_memory_content_reads_it_from_stdin(
        script_runner: ScriptRunner, vault: Vault) -> None:
    """`ps` shows any local user a process's argv while mem waits for the lock or the
    key: each command that takes content takes `-` for stdin instead."""
    added = mem(script_runner, "add", "-", stdin="the ferry to Porto leaves at noon\n")
    assert added.returncode == 0, added.stderr
    assert mem(script_runner, "pref", "set", "editor", "-", stdin="helix\n").returncode == 0
    assert mem(script_runner, "pref", "get", "editor").stdout.strip() == "helix"
    found = mem(script_runner, "search", "-", "--json", stdin="ferry porto\n")
    assert [r["content"] for r in json.loads(found.stdout)["results"]] == [
        "the ferry to Porto leaves at noon"]
    gone = mem(script_runner, "forget", "--query", "-", "--yes", stdin="ferry porto\n")
    assert gone.returncode == 0, gone.stderr
    assert json.loads(mem(script_runner, "search", "ferry", "--json").stdout)["results"] == []


# --- 14. exports and settings files ---------------------------------------------------------


def test_export_to_a_pipe_writes_into_it_and_leaves_it_a_pipe(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    import threading

    remember.add(vault, "the lighthouse keeper retires in May", "fact")
    fifo = tmp_path / "export.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    result = mem(script_runner, "export", "-o", str(fifo))
    reader.join(timeout=20)
    assert result.returncode == 0, result.stderr
    assert "lighthouse keeper" in received[0].decode()
    assert fifo.is_fifo()


def test_an_export_never_leaves_partial_plaintext_under_any_name(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While an export is written, and after one dies half-way, the folder holds no file
    but what was there: the export is linked into place only once complete."""
    from memvault.ops import portability

    remember.add(vault, "the lighthouse keeper retires in May", "fact")
    out = tmp_path / "exports"
    out.mkdir()
    seen: list[list[str]] = []
    original = portability.export

    def dying(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        seen.append(sorted(p.name for p in out.iterdir()))
        raise KeyboardInterrupt  # killed after writing everything but before the end

    monkeypatch.setattr(portability, "export", dying)
    with pytest.raises(KeyboardInterrupt):
        portability.export_to_file(vault, out / "memory.json")
    assert seen == [[]]
    assert list(out.iterdir()) == []
    monkeypatch.setattr(portability, "export", original)
    portability.export_to_file(vault, out / "memory.json")
    assert [p.name for p in out.iterdir()] == ["memory.json"]
    assert (out / "memory.json").stat().st_mode & 0o777 == 0o600


def test_hooks_install_writes_through_a_symlinked_settings_file(
        script_runner: ScriptRunner, tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "claude-settings.json"
    real.write_text('{"theme": "dark"}\n')
    link = tmp_path / "settings.json"
    link.symlink_to(real)
    result = mem(script_runner, "hooks", "install", "claude-code", "--settings", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and link.resolve() == real
    doc = json.loads(real.read_text())
    assert doc["theme"] == "dark" and "SessionStart" in doc["hooks"]


@pytest.mark.script_launch_mode("subprocess")
def test_an_argument_that_is_not_utf8_is_a_usage_error(script_runner: ScriptRunner,
                                                        vault: Vault) -> None:
    result = subprocess.run([str(Path(sys.executable).parent / "mem"), "add",
                             b"caf\xe9 au lait"],
                            capture_output=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "argument 2 is not UTF-8" in one_error_line(result.stderr.decode())
