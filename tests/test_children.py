"""The commands mem runs for the user (an external summariser, the key command): what
they are given of the environment, and that nothing they start outlives them, whether
they end normally, are stopped at their time-out, or mem itself dies."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from memvault.config import CompactionConfig, resolve
from memvault.crypto.keys import MasterKey
from memvault.errors import ConfigError
from memvault.model.records import NewMessage
from memvault.ops import compact, ingest
from memvault.vault.keysource import load_master_key
from memvault.vault.vault import Vault
from tests.test_hostile import dead

SRC = Path(__file__).resolve().parents[1] / "src" / "memvault"
# What a summariser may see (docs/security.md), and LC_*.
ALLOWED = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
           "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR"}
SECRETS = {  # what a user's shell may hold besides mem's settings
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-canary", "GITHUB_TOKEN": "ghp-canary",
    "OPENAI_API_KEY": "sk-canary", "ANTHROPIC_API_KEY": "sk-ant-canary",
    "VAULT_TOKEN": "hvs-canary", "DATABASE_URL": "postgres://u:pw-canary@h/db",
    "PYTHONPATH": "/tmp/canary-path", "LD_PRELOAD": "/tmp/canary.so",
    "SSH_AUTH_SOCK": "/tmp/canary.sock", "SOME_PRIVATE_THING": "canary-private",
}


def messages(n: int) -> list[NewMessage]:
    return [NewMessage(f"message {i} about topic number w{i}x", "user", f"m{i}",
                       f"2026-03-01T10:{i // 60:02d}:{i % 60:02d}Z") for i in range(n)]


def summaries(vault: Vault) -> list[str]:
    from memvault.model.records import Filters
    from memvault.ops import recall

    return [r.content for r in recall.list_records(vault, Filters(limit=1000)).records
            if r.type == "summary"]


def mem_names() -> set[str]:
    """Every MEM_* variable mem's code names (each setting's, the key's, debug, ...)."""
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        names.update(re.findall(r"\bMEM_[A-Z][A-Z0-9_]*", path.read_text()))
    assert {"MEM_MASTER_KEY", "MEM_KEY_COMMAND", "MEM_VAULT", "MEM_SUMMARIZER"} <= names
    return names


def executable(path: Path, body: str) -> str:
    path.write_text("#!" + sys.executable + "\n" + textwrap.dedent(body))
    path.chmod(0o700)
    return str(path)


def pids_in(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# A command that leaves processes behind, each writing its pid to PIDS: "child", one that
# calls setsid and sleeps; "orphan", one whose parent exits first after it called setsid
# (a daemon's double fork). Then it answers (ANSWER), or with HANG sleeps too.
LEAVER = """
    import os, sys, time
    pids = {pids!r}
    def leave(orphan):
        if os.fork() == 0:
            if orphan and os.fork() != 0:
                os._exit(0)
            os.setsid()
            with open(pids, "a") as f:
                f.write(f"{{os.getpid()}} ")
            time.sleep(300)
            os._exit(0)
    with open(pids, "a") as f:
        f.write(f"{{os.getpid()}} ")
    leave(False)
    leave(True)
    while len(open(pids).read().split()) < 3:
        time.sleep(0.01)
    sys.stdin.read() if not sys.stdin.isatty() and {reads!r} else None
    if {hang!r}:
        time.sleep(300)
    print({answer!r})
"""


def leaver(tmp_path: Path, answer: str, hang: bool = False, reads: bool = True
           ) -> tuple[str, Path]:
    pids = tmp_path / "pids"
    return executable(tmp_path / "leaver", LEAVER.format(
        pids=str(pids), answer=answer, hang=hang, reads=reads)), pids


# --- the summariser's environment -----------------------------------------------------------


def test_a_summariser_sees_no_mem_variable_and_no_secret_of_the_user(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ingest.add_messages(vault, "s1", messages(250))
    for name in mem_names():
        monkeypatch.setenv(name, f"canary-{name}")  # after the vault is open
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    seen = tmp_path / "env.json"
    cmd = executable(tmp_path / "summ", f"""
        import json, os, sys
        sys.stdin.read()
        json.dump(dict(os.environ), open({str(seen)!r}, "w"))
        print("Discussed the topic")
    """)
    out = compact.compact_user(vault, CompactionConfig(summarizer=cmd))
    assert out.summaries_added == 1, out.problems
    env = json.loads(seen.read_text())
    assert {k for k in env if not k.startswith("LC_")} <= ALLOWED, sorted(env)
    assert env["PATH"] == os.environ["PATH"] and env["LC_ALL"] == "C.UTF-8"
    assert not any("canary" in v for v in env.values()), env


def test_a_summariser_gets_the_variables_its_setting_names_and_never_mem_ones(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        config_dir: Path) -> None:
    ingest.add_messages(vault, "s1", messages(250))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-for-the-summariser")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-not-for-it")
    monkeypatch.setenv("MEM_MASTER_KEY", "canary")
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.yaml").write_text(
        "compaction:\n  summarizer_env: [OPENAI_API_KEY]\n")
    seen = tmp_path / "env.json"
    cmd = executable(tmp_path / "summ", f"""
        import json, os, sys
        sys.stdin.read()
        json.dump(dict(os.environ), open({str(seen)!r}, "w"))
        print("Discussed the topic")
    """)
    cfg = CompactionConfig(**{**resolve().values["compaction"], "summarizer": cmd})
    assert compact.compact_user(vault, cfg).summaries_added == 1
    env = json.loads(seen.read_text())
    assert env["OPENAI_API_KEY"] == "sk-for-the-summariser"
    assert "GITHUB_TOKEN" not in env and "MEM_MASTER_KEY" not in env
    (config_dir / "config.yaml").write_text(
        "compaction:\n  summarizer_env: [OPENAI_API_KEY, MEM_MASTER_KEY]\n")
    with pytest.raises(ConfigError, match="summarizer_env"):
        resolve()


# --- the summariser's processes -------------------------------------------------------------


@pytest.mark.parametrize("hang", [False, True], ids=["normal-exit", "time-out"])
def test_nothing_a_summariser_starts_outlives_it(vault: Vault, tmp_path: Path,
                                                  hang: bool) -> None:
    ingest.add_messages(vault, "s1", messages(250))
    cmd, pids = leaver(tmp_path, "Discussed the topic", hang=hang)
    try:
        out = compact.compact_user(vault, CompactionConfig(summarizer=cmd,
                                                           summarizer_timeout=3))
        assert len(pids_in(pids)) == 3  # the summariser and the two it left
        # No wait: compaction returns only once the summariser's tree is gone.
        assert [pid for pid in pids_in(pids) if not dead(pid)] == []
        if hang:
            assert [p.problem for p in out.problems] == ["summarizer"]
            assert "did not finish within 3s" in out.problems[0].message
        else:
            assert out.summaries_added == 1
            assert "Discussed the topic" in summaries(vault)[0]
    finally:
        kill_all(pids_in(pids))


def test_a_summariser_does_not_outlive_mem_killed_while_it_runs(
        vault: Vault, tmp_path: Path) -> None:
    """`mem compact` killed outright (SIGKILL: no clean-up of its own) while its
    summariser runs: nothing the summariser started lives on."""
    ingest.add_messages(vault, "s1", messages(250))
    cmd, pids = leaver(tmp_path, "never", hang=True)
    runner = subprocess.Popen([str(Path(sys.executable).parent / "mem"), "compact",
                               "--json"], env={**os.environ, "MEM_SUMMARIZER": cmd},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while len(pids_in(pids)) < 3:
            assert runner.poll() is None
            time.sleep(0.02)
        runner.kill()
        runner.wait()
        deadline = time.monotonic() + 30  # a bound on the wait, not a speed claim
        while [p for p in pids_in(pids) if not dead(p)] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [pid for pid in pids_in(pids) if not dead(pid)] == []
    finally:
        runner.kill()
        kill_all(pids_in(pids))


# --- the key command ------------------------------------------------------------------------


def test_the_key_command_gets_the_users_environment_but_no_mem_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It needs the user's own variables (a password manager's agent, store, session),
    and none of mem's: MEM_MASTER_KEY, when set too, is not its to see."""
    key = "A" * 43 + "="
    seen = tmp_path / "env.json"
    cmd = executable(tmp_path / "pm", f"""
        import json, os
        json.dump(dict(os.environ), open({str(seen)!r}, "w"))
        print({key!r})
    """)
    monkeypatch.setenv("MEM_KEY_COMMAND", cmd)
    settings = resolve()
    for name in mem_names() - {"MEM_KEY_COMMAND"}:  # settings already resolved
        monkeypatch.setenv(name, f"canary-{name}")
    monkeypatch.setenv("PASSWORD_STORE_DIR", str(tmp_path / "store"))
    got = load_master_key(settings)
    assert isinstance(got, MasterKey) and got.source == "MEM_KEY_COMMAND"
    env = json.loads(seen.read_text())
    assert env["PASSWORD_STORE_DIR"] == str(tmp_path / "store")
    assert not [k for k in env if k.startswith("MEM_")]
    assert not any("canary" in v for v in env.values())


def test_nothing_the_key_command_starts_outlives_it(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cmd, pids = leaver(tmp_path, "A" * 43 + "=", reads=False)
    monkeypatch.setenv("MEM_KEY_COMMAND", cmd)
    try:
        assert load_master_key(resolve()).source == "MEM_KEY_COMMAND"
        assert len(pids_in(pids)) == 3
        assert [pid for pid in pids_in(pids) if not dead(pid)] == []
    finally:
        kill_all(pids_in(pids))


# --- compaction's pool workers --------------------------------------------------------------


def test_a_pool_worker_holds_no_descriptor_its_caller_handed_down(
        vault: Vault, tmp_path: Path) -> None:
    """docs/cron.md runs `flock -n LOCK mem compact --all-users`: flock's lock is an open
    file mem inherits. A worker holding a copy would keep that lock as long as it lives;
    none does. (Its summariser looks: the worker is its keeper's parent.)"""
    for user in ("alice", "bob"):
        ingest.add_messages(Vault(resolve(user=user)), "s1", messages(250))
    lock, seen = tmp_path / "cron.lock", tmp_path / "seen"
    seen.mkdir()
    cmd = executable(tmp_path / "summ", f"""
        import os, sys
        sys.stdin.read()
        def parent(pid):
            return int(open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1])
        worker = parent(parent(os.getpid()))
        held = [os.readlink(f"/proc/{{worker}}/fd/{{fd}}")
                for fd in os.listdir(f"/proc/{{worker}}/fd")]
        open(os.path.join({str(seen)!r}, str(worker)), "w").write("\\n".join(held))
        print("Discussed the topic")
    """)
    done = subprocess.run(
        ["flock", "-n", str(lock), str(Path(sys.executable).parent / "mem"), "compact",
         "--all-users", "--jobs", "2", "--json"],
        env={**os.environ, "MEM_SUMMARIZER": cmd}, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["summaries_added"] == 2
    held = {p.name: p.read_text().split("\n") for p in seen.iterdir()}
    assert held  # the workers that ran a summariser
    assert not [h for h in held.values() if str(lock) in h], held


def test_a_worker_also_ends_when_its_parents_pipe_closes() -> None:
    """The way a worker notices its parent's death where there is no parent-death
    signal: the pipe only the parent writes to closes (here closed by a parent that
    lives on, so that the kernel's signal plays no part)."""
    code = textwrap.dedent("""
        import os, time
        from memvault.process import EXIT_ORPHAN, die_with_parent
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(w)
            die_with_parent(os.getppid(), r)
            time.sleep(300)
            os._exit(0)
        os.close(r)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status) == EXIT_ORPHAN)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)  # a bound on a hang, not a speed claim
    assert done.stdout.strip() == "True"
