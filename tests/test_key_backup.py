"""The master key's backup and restore (`mem key`), and what a missing key is told to be
(SPEC §4, §6). The OS keyring as a key source: tests/test_keyring.py."""

from __future__ import annotations

import base64
import json
import os
import pty
import select
import stat
import sys
import time
from pathlib import Path

import pytest

from memvault.config import resolve
from memvault.errors import EX_CONFIG, EX_DATAERR, EX_NOPERM, EX_USAGE
from memvault.ops import keys as ops_keys
from memvault.vault import keysource
from tests.conftest import home_environment, mem, one_error_line

MEM = str(Path(sys.executable).parent / "mem")
PASSPHRASE = "correct horse battery"


def master_key() -> bytes:
    return base64.b64decode(keysource.default_key_path().read_text())


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def new_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> Path:
    """Another home and config directory, the same vault directory."""
    home = tmp_path / name
    home.mkdir()
    for variable, value in home_environment(home).items():
        monkeypatch.setenv(variable, value)
    monkeypatch.setenv("MEM_CONFIG_DIR", str(home / "config"))
    return home


@pytest.fixture
def passphrase_file(tmp_path: Path) -> Path:
    path = tmp_path / "passphrase"
    path.write_text(PASSPHRASE + "\n")
    return path


@pytest.fixture
def with_memory(script_runner, vault_dir) -> None:
    assert mem(script_runner, "init").returncode == 0
    assert mem(script_runner, "add", "The deploy key rotates every quarter",
               "--type", "fact").returncode == 0


# --- backup and restore ------------------------------------------------------------------


def test_backup_restores_on_a_fresh_machine_after_a_key_rotation(
        tmp_path, monkeypatch, script_runner, with_memory, passphrase_file, vault_dir):
    key = master_key()
    assert ops_keys.backup_status(resolve()).state == "never"
    backup = tmp_path / "mem-key.backup"
    result = mem(script_runner, "key", "backup", "--output", str(backup),
                 "--passphrase-file", str(passphrase_file), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["output"] == str(backup)
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    text = backup.read_text()
    assert json.loads(text)["format"] == "mem-passphrase-key/1"
    assert base64.b64encode(key).decode() not in text and key.hex() not in text
    assert key not in backup.read_bytes() and PASSPHRASE not in text
    status = ops_keys.backup_status(resolve())
    assert status.state == "backed-up" and status.backed_up_at
    # rotate-key changes data keys only: the master key, and so the backup, stay good.
    assert mem(script_runner, "rotate-key", "--now").returncode == 0
    assert ops_keys.backup_status(resolve()).backed_up

    new_machine(tmp_path, monkeypatch, "laptop")
    lost = mem(script_runner, "search", "deploy key")
    assert lost.returncode == EX_CONFIG
    result = mem(script_runner, "key", "restore", str(backup),
                 "--passphrase-file", str(passphrase_file))
    assert result.returncode == 0, result.stderr
    restored = keysource.default_key_path()
    assert restored.read_bytes().strip() == base64.b64encode(key)
    assert stat.S_IMODE(restored.stat().st_mode) == 0o600
    found = mem(script_runner, "search", "deploy key", "--json")
    assert found.returncode == 0, found.stderr
    assert [r["content"] for r in json.loads(found.stdout)["results"]] == [
        "The deploy key rotates every quarter"]
    again = mem(script_runner, "key", "restore", str(backup), "--json",
                "--passphrase-file", str(passphrase_file))  # the same key: nothing to do
    assert again.returncode == 0 and json.loads(again.stdout)["written"] is False


def test_wrong_passphrase_exits_77_and_writes_nothing(
        tmp_path, monkeypatch, script_runner, with_memory, passphrase_file):
    backup = tmp_path / "backup"
    assert mem(script_runner, "key", "backup", "-o", str(backup),
               "--passphrase-file", str(passphrase_file)).returncode == 0
    home = new_machine(tmp_path, monkeypatch, "other")
    wrong = tmp_path / "wrong"
    wrong.write_text("correct horse batterY\n")
    result = mem(script_runner, "key", "restore", str(backup), "--passphrase-file", str(wrong))
    assert result.returncode == EX_NOPERM
    assert "wrong passphrase" in one_error_line(result.stderr)
    torn = tmp_path / "torn"
    torn.write_text(backup.read_text()[:100])  # a backup cut short is bad input: 65
    result = mem(script_runner, "key", "restore", str(torn), "--passphrase-file", str(wrong))
    assert result.returncode == EX_DATAERR, result.stderr
    assert not keysource.default_key_path().exists()
    assert files(home) == {}


def test_a_backup_of_another_vaults_key_is_refused_before_anything_is_written(
        tmp_path, monkeypatch, script_runner, with_memory, passphrase_file, vault_dir):
    monkeypatch.setenv("MEM_VAULT", str(tmp_path / "other-vault"))
    new_machine(tmp_path, monkeypatch, "other")
    assert mem(script_runner, "init").returncode == 0
    other = tmp_path / "other.backup"
    assert mem(script_runner, "key", "backup", "-o", str(other),
               "--passphrase-file", str(passphrase_file)).returncode == 0
    monkeypatch.setenv("MEM_VAULT", str(vault_dir))
    home = new_machine(tmp_path, monkeypatch, "third")
    result = mem(script_runner, "key", "restore", str(other),
                 "--passphrase-file", str(passphrase_file))
    assert result.returncode == EX_NOPERM
    assert "another vault" in one_error_line(result.stderr)
    assert files(home) == {}


def test_restore_never_replaces_a_different_key(
        tmp_path, monkeypatch, script_runner, with_memory, passphrase_file):
    backup = tmp_path / "backup"
    assert mem(script_runner, "key", "backup", "-o", str(backup),
               "--passphrase-file", str(passphrase_file)).returncode == 0
    other_key = tmp_path / "other.key"
    other_key.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    other_key.chmod(0o600)
    before = other_key.read_bytes()
    result = mem(script_runner, "key", "restore", str(backup), "--key-file", str(other_key),
                 "--passphrase-file", str(passphrase_file))
    assert result.returncode == EX_NOPERM
    assert "never replaced" in one_error_line(result.stderr)
    assert other_key.read_bytes() == before


def test_backup_never_overwrites_a_file_without_force(
        tmp_path, script_runner, with_memory, passphrase_file):
    backup = tmp_path / "backup"
    backup.write_text("my notes\n")
    args = ["key", "backup", "-o", str(backup), "--passphrase-file", str(passphrase_file)]
    result = mem(script_runner, *args)
    assert result.returncode == EX_NOPERM and "--force" in one_error_line(result.stderr)
    assert backup.read_text() == "my notes\n"
    short = tmp_path / "short"
    short.write_text("2short\n")
    result = mem(script_runner, "key", "backup", "-o", str(tmp_path / "b2"),
                 "--passphrase-file", str(short))
    assert result.returncode == EX_USAGE and not (tmp_path / "b2").exists()
    assert mem(script_runner, *args, "--force").returncode == 0
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert json.loads(backup.read_text())["format"] == "mem-passphrase-key/1"


def test_the_documented_reader_opens_a_backup(tmp_path, vault, passphrase_file):
    """docs/vault-format.md's reader, run as it is written there: the format is enough to
    get the key back without mem."""
    import re

    from memvault.crypto.envelope import key_check_value

    doc = (Path(__file__).parent.parent / "docs" / "vault-format.md").read_text()
    section = doc[doc.index("### Key backup"):doc.index("### OS keyring entry")]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None
    namespace: dict[str, object] = {}
    exec(code.group(1), namespace)  # noqa: S102 - the document's own example
    backup = tmp_path / "backup"
    ops_keys.backup_key(vault, backup, PASSPHRASE)
    key = namespace["open_backup"](backup.read_text(), PASSPHRASE)  # type: ignore[operator]
    assert key == vault.master.key
    assert key_check_value(key) == json.loads((vault.root / "vault.json").read_text())[
        "key_check"]


def test_backup_status_tells_a_backup_of_another_key(vault, vault_dir):
    settings = resolve()
    meta = json.loads((vault_dir / "vault.json").read_text())
    meta["key_backup"] = {"at": "2025-01-02T03:04:05Z", "key_check": "0" * 32}
    (vault_dir / "vault.json").write_text(json.dumps(meta))
    status = ops_keys.backup_status(settings)
    assert status.state == "other-key" and not status.backed_up


def _talk(fd: int, answers: dict[str, str], timeout: float = 60) -> str:
    """Read a pty until the child exits, answering each prompt as it appears."""
    seen, out = "", b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 1024)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
        seen += chunk.decode(errors="replace")
        for prompt, answer in answers.items():
            if prompt in seen:
                seen = seen.split(prompt, 1)[1]
                os.write(fd, (answer + "\n").encode())
    return out.decode(errors="replace")


def test_backup_asks_the_passphrase_twice_on_a_terminal(
        tmp_path, script_runner, with_memory, passphrase_file):
    backup = tmp_path / "typed.backup"
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal, as a user's would be
        os.execve(MEM, [MEM, "key", "backup", "--output", str(backup)], dict(os.environ))
    transcript = _talk(fd, {"Passphrase for the backup: ": PASSPHRASE,
                            "Repeat it: ": PASSPHRASE})
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, transcript
    assert PASSPHRASE not in transcript  # never echoed
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    # What was typed is the passphrase the scripted restore opens it with.
    key = master_key()
    assert ops_keys.restore_key(resolve(), backup, PASSPHRASE).written is False
    assert master_key() == key


# --- a missing key, and what init says ------------------------------------------------------


def test_a_missing_key_for_a_vault_with_memory_points_at_restore_never_at_init(
        tmp_path, monkeypatch, script_runner, with_memory, vault_dir):
    keysource.default_key_path().unlink()
    before = files(vault_dir)
    for args in (["search", "deploy"], ["add", "more"], ["init"]):
        result = mem(script_runner, *args)
        assert result.returncode == EX_CONFIG, (args, result.stderr)
        line = one_error_line(result.stderr)
        assert "no master key" in line and "holds memory" in line
        assert "mem key restore" in line and "mem init" not in line
    assert files(vault_dir) == before
    assert not keysource.default_key_path().exists()


def test_a_missing_key_for_a_vault_without_memory_may_suggest_init(
        script_runner, vault_dir):
    assert mem(script_runner, "init").returncode == 0
    keysource.default_key_path().unlink()
    line = one_error_line(mem(script_runner, "list").stderr)
    assert "mem key restore" in line and "mem init" in line


def test_a_new_machine_gets_the_vault_from_a_backup_and_a_sync(
        tmp_path, monkeypatch, script_runner, with_memory, passphrase_file):
    """The README's second machine: `mem key restore` where no vault is makes one for
    the backup's key, and `mem sync` fills it; a vault `mem init` made there with its
    own key is never given the backup's."""
    backup, remote = tmp_path / "backup", tmp_path / "remote"
    remote.mkdir()
    assert mem(script_runner, "key", "backup", "-o", str(backup),
               "--passphrase-file", str(passphrase_file)).returncode == 0
    assert mem(script_runner, "sync", "--remote", str(remote)).returncode == 0

    new_machine(tmp_path, monkeypatch, "laptop")
    monkeypatch.setenv("MEM_VAULT", str(tmp_path / "laptop-vault"))
    result = mem(script_runner, "key", "restore", str(backup), "--json",
                 "--passphrase-file", str(passphrase_file))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["vault"], doc["vault_created"], doc["written"]) == (
        str(tmp_path / "laptop-vault"), True, True)
    assert keysource.default_key_path().read_bytes().strip() == base64.b64encode(
        master_key())
    assert ops_keys.backup_status(resolve()).backed_up  # it came from one
    assert mem(script_runner, "sync", "--remote", str(remote)).returncode == 0
    found = mem(script_runner, "search", "deploy key", "--json")
    assert [r["content"] for r in json.loads(found.stdout)["results"]] == [
        "The deploy key rotates every quarter"]

    new_machine(tmp_path, monkeypatch, "desktop")
    monkeypatch.setenv("MEM_VAULT", str(tmp_path / "desktop-vault"))
    assert mem(script_runner, "init").returncode == 0
    made = files(tmp_path / "desktop"), files(tmp_path / "desktop-vault")
    refused = mem(script_runner, "key", "restore", str(backup),
                  "--passphrase-file", str(passphrase_file))
    assert refused.returncode == EX_NOPERM
    line = one_error_line(refused.stderr)
    assert "another vault" in line and "holds no memory" in line
    assert (files(tmp_path / "desktop"), files(tmp_path / "desktop-vault")) == made


def test_init_says_where_the_key_is_and_how_to_back_it_up(script_runner, vault_dir):
    result = mem(script_runner, "init")
    assert result.returncode == 0
    path = str(keysource.default_key_path())
    assert path in result.stderr and "mem key backup" in result.stderr
    assert "without it nothing in the vault can be read" in result.stderr
    again = mem(script_runner, "init")
    assert "no backup" in again.stderr and "mem key backup" in again.stderr


# --- the config file line --------------------------------------------------------------


def test_keyring_choice_is_added_to_the_users_config_file_as_it_is(config_dir):
    from memvault.config import file_with_setting
    from memvault.errors import ConfigError

    config_dir.mkdir()
    path = config_dir / "config.yaml"
    path.write_text("# my settings\norg: acme  # work\n")
    target, data = file_with_setting("key_source", "keyring") or (None, b"")
    assert target == path
    assert data.decode() == "# my settings\norg: acme  # work\nkey_source: keyring\n"
    path.write_text("{org: acme}")  # flow style takes no appended line
    with pytest.raises(ConfigError):
        file_with_setting("key_source", "keyring")
    path.write_text("key_source: keyring\n")
    assert file_with_setting("key_source", "keyring") is None
