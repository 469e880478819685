"""The suite never touches the home of whoever runs it: every run of `mem`, in-process or as
the installed script, finds its home, its XDG directories and its log under the test's
own tmp_path (whatever XDG_* the caller's shell sets), and a child process cannot be
started without a home."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from pytest_console_scripts import ScriptRunner

from tests.conftest import mem, sentinel_home


@pytest.mark.script_launch_mode("both")
def test_every_run_of_mem_has_the_tests_own_home(
        script_runner: ScriptRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.delenv("MEM_VAULT")
    monkeypatch.delenv("MEM_CONFIG_DIR")
    result = mem(script_runner, "hook", "claude-code", stdin="not a hook's JSON")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    log = home / ".local" / "state" / "mem" / "log" / "hooks.log"
    assert "claude-code" in log.read_text()  # the default log directory, in this home
    shown = json.loads(mem(script_runner, "config", "show", "--json").stdout)
    assert shown["config_file"] == str(home / ".config" / "mem" / "config.yaml")
    assert shown["settings"]["vault"]["value"] == str(home / ".local" / "share" / "mem")
    assert sentinel_home().is_dir() and not list(sentinel_home().rglob("*"))
    assert str(sentinel_home()) not in os.environ["HOME"]


def test_every_home_variable_points_into_the_test(tmp_path: Path) -> None:
    for name in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
                 "XDG_CACHE_HOME", "XDG_RUNTIME_DIR"):
        assert os.environ[name].startswith(str(tmp_path)), name
    assert "CLAUDE_CONFIG_DIR" not in os.environ and "CODEX_HOME" not in os.environ


def test_a_child_without_a_home_in_its_environment_is_stopped() -> None:
    with pytest.raises(AssertionError, match="without HOME"):
        subprocess.run(["true"], env={"PATH": os.defpath}, check=False)
    assert subprocess.run(["true"], env={"HOME": "/nonexistent"}, check=False).returncode == 0
