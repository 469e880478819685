"""Where the master key comes from when several sources are set."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.cli.errors import word
from memvault.config import resolve
from memvault.errors import UsageError
from memvault.ops.admin import init
from memvault.vault.keysource import load_master_key
from tests.conftest import mem


def test_config_file_key_ranks_below_environment_sources(
    config_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "file.key"
    key_file.write_text(base64.b64encode(os.urandom(32)).decode())
    key_file.chmod(0o600)
    config_dir.mkdir()
    (config_dir / "config.yaml").write_text(f"key_file: {key_file}\n")
    assert "config file" in load_master_key(resolve()).source
    monkeypatch.setenv("MEM_MASTER_KEY", base64.b64encode(os.urandom(32)).decode())
    assert load_master_key(resolve()).source == "MEM_MASTER_KEY"
    monkeypatch.setenv("MEM_KEY_FILE", str(key_file))
    assert "MEM_KEY_FILE" in load_master_key(resolve()).source


def test_passphrase_with_a_configured_source_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                         config_dir: Path) -> None:
    monkeypatch.setenv("MEM_MASTER_KEY", base64.b64encode(os.urandom(32)).decode())
    with pytest.raises(UsageError, match="passphrase") as err:
        init(resolve(), passphrase="secret words")
    assert err.value.field == "passphrase"
    assert "--passphrase" in word(err.value)  # how the command line words it
    assert not (config_dir / "master.key").exists()


def test_init_creates_a_named_key_file_that_does_not_exist_yet(
        script_runner: ScriptRunner, tmp_path: Path, config_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "keys" / "mem.key"
    monkeypatch.setenv("MEM_KEY_FILE", str(key_file))
    result = mem(script_runner, "init", "--json")
    assert result.returncode == 0, result.stderr
    assert str(key_file) in json.loads(result.stdout)["key_source"]  # it says where
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    assert not (config_dir / "master.key").exists()  # made where it was named, only there
    assert mem(script_runner, "add", "Prefers tea", "--type", "preference").returncode == 0
    # Only init makes a key: once the vault exists, a missing key file is exit 78.
    key_file.unlink()
    for command in (["init"], ["search", "tea"]):
        assert mem(script_runner, *command).returncode == 78, command
    assert not key_file.exists()
