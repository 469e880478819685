"""Every test is sealed: no MEM_* from the caller, vault and config under tmp_path, no colour.

The `mem` helper runs the command line in-process by default (pytest-console-scripts'
inprocess mode); tests that check exit codes and the stdout/stderr split of the real
installed script mark themselves `@pytest.mark.script_launch_mode("subprocess")`.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings
from pytest_console_scripts import ScriptRunner

from memvault.config import resolve
from memvault.ops.admin import init
from memvault.vault.vault import Vault

# CI runs every property with the same examples, so that a failure is reproducible and
# never comes and goes; locally Hypothesis explores (HYPOTHESIS_PROFILE=dev).
hypothesis_settings.register_profile("ci", derandomize=True, deadline=None,
                                     print_blob=True)
hypothesis_settings.register_profile("dev", deadline=None)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def sealed_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("MEM_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("MEM_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("MEM_VAULT", str(tmp_path / "vault"))
    monkeypatch.setenv("MEM_USER", "alice")
    monkeypatch.setenv("MEM_LOCK_TIMEOUT", "2")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    # The installed `mem` script lives beside this interpreter, activated or not.
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent),
                                                os.environ.get("PATH", "")]))
    yield


@pytest.fixture
def vault_dir(tmp_path: Path) -> Path:
    return tmp_path / "vault"


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    return tmp_path / "config"


@pytest.fixture
def vault(vault_dir: Path) -> Vault:
    """An initialised vault opened for user alice."""
    init(resolve())
    return Vault(resolve())


def open_as(user: str, org: str = "default") -> Vault:
    return Vault(resolve(user=user, org=org))


def mem(script_runner: ScriptRunner, *args: str, stdin: str = "", cwd: Path | None = None,
        **env: str) -> Any:
    """Run `mem` (in-process unless the test asks for the installed script). stdin is
    always a pipe, never the terminal pytest runs in (so nothing asks a question), with
    the byte buffer a real pipe has (`mem ingest -` reads bytes); `env` adds variables."""
    kwargs: dict[str, Any] = {
        "stdin": io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")}
    if cwd is not None:
        kwargs["cwd"] = str(cwd)
    if env:
        kwargs["env"] = {**os.environ, **env}
    return script_runner.run(["mem", *args], **kwargs)


def one_error_line(stderr: str) -> str:
    """A known error: exactly one stderr line, mem's prefix, no traceback."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("mem: error: ")
    return lines[0]
