"""The master key (SPEC §4): where it comes from, what is refused, and that only init makes one."""

from __future__ import annotations

import base64
import io
import json
import os
import shlex
import stat
import sys
from pathlib import Path

import pytest

from memvault.config import resolve
from memvault.crypto.keys import MasterKey, seal_with_passphrase
from memvault.errors import EX_CONFIG, EX_NOPERM, ConfigError, PassphraseNeeded, Refused
from memvault.ops import remember
from memvault.ops.admin import init
from memvault.vault import keysource as keys
from memvault.vault.keysource import load_master_key
from memvault.vault.vault import Vault
from tests.conftest import mem, one_error_line

MEM = str(Path(sys.executable).parent / "mem")
# Cheap KDF parameters: the file format carries them, so tests need not pay for the defaults.
ARGON_FAST = {"kdf": "argon2id", "m": 8192, "t": 1, "p": 1}
SCRYPT_FAST = {"kdf": "scrypt", "n": 2**14, "r": 8, "p": 1}


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def new_key() -> bytes:
    return os.urandom(32)


def write_key_file(path: Path, key: bytes, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(b64(key) + "\n")
    path.chmod(mode)
    return path


def key_command(tmp_path: Path, key: bytes, name: str = "printkey.py") -> str:
    """A MEM_KEY_COMMAND that prints `key` (a tiny password-manager stand-in)."""
    script = tmp_path / name
    script.write_text(f"print({b64(key)!r})\n")
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


# --- wrong key, no key ---------------------------------------------------------------------


@pytest.mark.script_launch_mode("subprocess")
def test_wrong_master_key_is_refused_with_77_and_prints_nothing(vault, vault_dir, script_runner):
    remember.add(vault, "the wrong key must not reveal zanzibarwrongkey", "fact")
    files_before = tree(vault_dir)
    for args in (["list"], ["add", "another fact"], ["verify"], ["pref", "get", "x"]):
        result = script_runner.run([MEM, *args], env=env_with(MEM_MASTER_KEY=b64(new_key())))
        assert result.returncode == EX_NOPERM, (args, result.stderr)
        line = one_error_line(result.stderr)
        assert "wrong key" in line
        assert result.stdout == ""
        assert "zanzibarwrongkey" not in result.stderr
    assert tree(vault_dir) == files_before


@pytest.mark.script_launch_mode("subprocess")
def test_no_key_anywhere_exits_78_and_never_creates_one(
    vault_dir, config_dir, monkeypatch, script_runner
):
    monkeypatch.setenv("MEM_MASTER_KEY", b64(new_key()))
    init(resolve())
    remember.add(Vault(resolve()), "a fact", "fact")
    monkeypatch.delenv("MEM_MASTER_KEY")
    assert not keys.default_key_path().exists()
    vault_before = {p: p.read_bytes() for p in vault_dir.rglob("*") if p.is_file()}
    for args in (["add", "x"], ["list"], ["verify"], ["pref", "set", "k", "v"], ["stats"]):
        result = script_runner.run([MEM, *args])
        assert result.returncode == EX_CONFIG, (args, result.stderr)
        assert "no master key" in one_error_line(result.stderr)
        assert result.stdout == ""
    assert not keys.default_key_path().exists()
    assert not config_dir.exists() or not any(config_dir.iterdir())
    assert {p: p.read_bytes() for p in vault_dir.rglob("*") if p.is_file()} == vault_before


@pytest.mark.script_launch_mode("subprocess")
def test_init_with_a_missing_explicit_key_file_makes_the_key_there_only(
    tmp_path, vault_dir, config_dir, script_runner
):
    missing = tmp_path / "secrets" / "mem.key"
    result = script_runner.run([MEM, "init", "--key-file", str(missing)])
    assert result.returncode == 0, result.stderr
    assert str(missing) in result.stdout  # the table names the key file
    assert stat.S_IMODE(missing.stat().st_mode) == 0o600
    assert not keys.default_key_path().exists()
    assert (vault_dir / "vault.json").exists()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o700])
def test_key_file_open_to_others_is_refused(tmp_path, mode):
    path = write_key_file(tmp_path / "k", new_key(), mode)
    if mode == 0o700:  # owner-only execute bit: still private, accepted
        assert load_master_key(resolve(key_file=path)).source.startswith("key file")
        return
    with pytest.raises(ConfigError) as err:
        load_master_key(resolve(key_file=path))
    assert err.value.exit_code == EX_CONFIG
    assert f"chmod 600 {path}" in err.value.message


@pytest.mark.script_launch_mode("subprocess")
def test_default_key_file_made_world_readable_exits_78_with_chmod_hint(vault, script_runner):
    path = keys.default_key_path()
    path.chmod(0o644)
    result = script_runner.run([MEM, "list"])
    assert result.returncode == EX_CONFIG
    line = one_error_line(result.stderr)
    assert "chmod" in line and str(path) in line
    path.chmod(0o600)
    assert script_runner.run([MEM, "add", "Prefers tea"]).returncode == 0


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root to give the key file to another owner")
def test_key_file_owned_by_someone_else_is_refused(tmp_path):
    path = write_key_file(tmp_path / "k", new_key())
    os.chown(path, 4242, 4242)
    with pytest.raises(ConfigError, match="not owned by you"):
        load_master_key(resolve(key_file=path))


@pytest.mark.parametrize("value",
                         ["not base64!!", b64(bytes(range(16))), b64(bytes(range(33))), " "],
                         ids=["not-base64", "16-bytes", "33-bytes", "blank"])
def test_malformed_master_key_env_is_a_config_error(monkeypatch, value):
    monkeypatch.setenv("MEM_MASTER_KEY", value)
    with pytest.raises(ConfigError, match="MEM_MASTER_KEY"):
        load_master_key(resolve())


# --- source order ------------------------------------------------------------------------


LEVELS = ["flag", "command", "env", "default"]


@pytest.mark.parametrize("winner", LEVELS)
def test_key_source_order(tmp_path, script_runner, winner):
    """--key-file beats MEM_KEY_COMMAND beats MEM_MASTER_KEY beats the default key file."""
    keyset = {level: new_key() for level in LEVELS}
    flag_file = write_key_file(tmp_path / "flag.key", keyset["flag"])
    write_key_file(keys.default_key_path(), keyset["default"])
    active = LEVELS[LEVELS.index(winner):]  # the winner and every weaker source
    env = env_with()
    args = [MEM, "init", "--json"]
    if "flag" in active:
        args += ["--key-file", str(flag_file)]
    if "command" in active:
        env["MEM_KEY_COMMAND"] = key_command(tmp_path, keyset["command"])
    if "env" in active:
        env["MEM_MASTER_KEY"] = b64(keyset["env"])
    result = script_runner.run(args, env=env)
    assert result.returncode == 0, result.stderr
    source = json.loads(result.stdout)["key_source"]
    expected = {"flag": f"key file {flag_file} (flag --key-file)",
                "command": "MEM_KEY_COMMAND", "env": "MEM_MASTER_KEY",
                "default": f"key file {keys.default_key_path()}"}[winner]
    assert source == expected
    # The vault is bound to the winner's key, and to no other source's key.
    for level, key in keyset.items():
        if level == winner:
            Vault(resolve(), master=MasterKey(key, level))
        else:
            with pytest.raises(Refused):
                Vault(resolve(), master=MasterKey(key, level))


def test_key_file_flag_beats_key_file_env(tmp_path, monkeypatch):
    flag_key, env_key = new_key(), new_key()
    flag_file = write_key_file(tmp_path / "flag.key", flag_key)
    monkeypatch.setenv("MEM_KEY_FILE", str(write_key_file(tmp_path / "env.key", env_key)))
    assert load_master_key(resolve()).key == env_key
    assert load_master_key(resolve(key_file=flag_file)).key == flag_key


def test_key_command_opens_the_vault_it_created(tmp_path, monkeypatch, script_runner):
    monkeypatch.setenv("MEM_KEY_COMMAND", key_command(tmp_path, new_key()))
    assert script_runner.run([MEM, "init"]).returncode == 0
    assert not keys.default_key_path().exists()
    result = script_runner.run([MEM, "add", "kept by the password manager", "--json"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["deduplicated"] is False


def test_key_command_runs_without_a_shell(tmp_path, monkeypatch, script_runner):
    marker, marker2 = tmp_path / "pwned", tmp_path / "pwned2"
    key = new_key()
    command = (key_command(tmp_path, key) + f" ; touch {marker} && echo `touch {marker2}`"
               f" $(touch {marker2}) | cat > {marker}")
    monkeypatch.setenv("MEM_KEY_COMMAND", command)
    result = script_runner.run([MEM, "init", "--json"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["key_source"] == "MEM_KEY_COMMAND"
    # Shell syntax reached the command as plain arguments: nothing ran, nothing was created.
    assert not marker.exists() and not marker2.exists()
    Vault(resolve(), master=MasterKey(key, "test"))


@pytest.mark.parametrize("command", [
    "{py} -c 'import sys; sys.exit(3)'",
    "{py} -c 'print(\"not a key\")'",
    "{py} -c 'print()'",
    "/nonexistent/password-manager get mem",
    "''",
])
def test_failing_key_command_is_a_config_error(monkeypatch, command):
    monkeypatch.setenv("MEM_KEY_COMMAND", command.format(py=shlex.quote(sys.executable)))
    with pytest.raises(ConfigError, match="MEM_KEY_COMMAND"):
        load_master_key(resolve())


@pytest.mark.script_launch_mode("subprocess")
def test_failing_key_command_exits_78_even_with_a_default_key(vault, monkeypatch, script_runner):
    """A configured source that fails is an error, not a silent fall-back to a weaker one."""
    monkeypatch.setenv("MEM_KEY_COMMAND", f"{shlex.quote(sys.executable)} -c 'raise SystemExit(1)'")
    result = script_runner.run([MEM, "list"])
    assert result.returncode == EX_CONFIG
    assert "MEM_KEY_COMMAND exited with status 1" in one_error_line(result.stderr)


# --- passphrase-wrapped key file ---------------------------------------------------------------


@pytest.mark.parametrize("params", [ARGON_FAST, SCRYPT_FAST], ids=["argon2id", "scrypt"])
def test_passphrase_key_file_round_trip(tmp_path, params):
    key = new_key()
    path = tmp_path / "pw.key"
    path.write_text(seal_with_passphrase(key, "correct horse", params))
    path.chmod(0o600)
    text = path.read_text()
    assert b64(key) not in text and "correct horse" not in text
    assert json.loads(text)["params"] == params  # parameters live in the header
    master = load_master_key(resolve(key_file=path), passphrase="correct horse")
    assert master.key == key
    with pytest.raises(PassphraseNeeded) as needed:  # the core never asks: a surface does
        load_master_key(resolve(key_file=path))
    assert needed.value.exit_code == EX_CONFIG
    with pytest.raises(Refused) as err:
        load_master_key(resolve(key_file=path), passphrase="correct h0rse")
    assert err.value.exit_code == EX_NOPERM
    assert str(path) in err.value.message


def test_passphrase_key_file_header_is_authenticated(tmp_path):
    path = tmp_path / "pw.key"
    path.write_text(seal_with_passphrase(new_key(), "pw", ARGON_FAST))
    path.chmod(0o600)
    doc = json.loads(path.read_text())
    doc["params"]["t"] = 2  # a downgraded or edited header must not open
    path.write_text(json.dumps(doc))
    with pytest.raises(Refused):
        load_master_key(resolve(key_file=path), passphrase="pw")


@pytest.mark.script_launch_mode("subprocess")
@pytest.mark.parametrize("where", ["flag", "default"])
def test_passphrase_key_file_without_a_terminal_exits_78_without_waiting(
    tmp_path, vault_dir, script_runner, where
):
    key = new_key()
    path = tmp_path / "pw.key" if where == "flag" else keys.default_key_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(seal_with_passphrase(key, "pw", ARGON_FAST))
    path.chmod(0o600)
    # Create the vault with the raw key, then run as cron would: stdin is not a terminal.
    env = env_with(MEM_MASTER_KEY=b64(key))
    assert script_runner.run([MEM, "init"], env=env).returncode == 0
    args = [MEM, "list"] + (["--key-file", str(path)] if where == "flag" else [])
    # A new session: no controlling terminal, whatever terminal runs the tests.
    result = script_runner.run(args, stdin=io.StringIO(""), timeout=30,
                               start_new_session=True)
    assert result.returncode == EX_CONFIG
    line = one_error_line(result.stderr)
    assert "passphrase" in line and "no terminal" in line
    assert result.stdout == ""


def test_a_passphrase_is_asked_on_the_terminal_when_stdin_is_a_pipe(
        tmp_path, vault_dir, script_runner, monkeypatch):
    """`echo text | mem add -` with a passphrase key: stdin carries the text, and the
    passphrase is asked on the terminal (getpass reads /dev/tty), not refused."""
    from memvault.cli import context

    key = new_key()
    path = tmp_path / "pw.key"
    path.write_text(seal_with_passphrase(key, "pw", ARGON_FAST))
    path.chmod(0o600)
    monkeypatch.setenv("MEM_MASTER_KEY", b64(key))
    assert script_runner.run([MEM, "init"]).returncode == 0
    monkeypatch.delenv("MEM_MASTER_KEY")
    asked: list[str] = []
    monkeypatch.setattr(context, "has_terminal", lambda: True)
    monkeypatch.setattr("getpass.getpass", lambda prompt: asked.append(prompt) or "pw")
    result = mem(script_runner, "add", "-", "--key-file", str(path),
                 stdin="the spare key is under the mat\n")
    assert result.returncode == 0, result.stderr
    assert len(asked) == 1 and str(path) in asked[0]


@pytest.mark.script_launch_mode("subprocess")
def test_init_passphrase_without_a_terminal_is_a_usage_error(vault_dir, script_runner):
    result = script_runner.run([MEM, "init", "--passphrase"], stdin=io.StringIO("pw\npw\n"),
                               timeout=30)
    assert result.returncode == 2
    assert "terminal" in one_error_line(result.stderr)
    assert not keys.default_key_path().exists()
    assert not vault_dir.exists()


def test_default_key_file_is_private_and_only_init_creates_it(vault_dir, script_runner):
    assert script_runner.run([MEM, "list"]).returncode != 0  # no vault yet: nothing created
    assert not keys.default_key_path().exists()
    assert script_runner.run([MEM, "init"]).returncode == 0
    path = keys.default_key_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    before = path.read_bytes()
    assert script_runner.run([MEM, "init"]).returncode == 0  # idempotent: same key kept
    assert path.read_bytes() == before
