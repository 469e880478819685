"""Where the master key comes from when several sources are set."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from memvault.cli.errors import word
from memvault.config import resolve
from memvault.errors import UsageError
from memvault.ops.admin import init
from memvault.vault.keysource import load_master_key


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
