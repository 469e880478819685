"""Every test is sealed: no MEM_* from the caller, vault and config under tmp_path, no colour.

No test touches the home of whoever runs the suite. Each test gets a home of its own
(HOME and every XDG_* directory platformdirs reads, under tmp_path); whatever runs outside
a test (collection, module fixtures) and every process the run starts has a sentinel home
made for the run, which must still be empty when the run ends; and a process started with
an environment of its own must name a home in it (else it would find the real one in
the password database).

The `mem` helper runs the command line in-process by default (pytest-console-scripts'
inprocess mode); tests that check exit codes and the stdout/stderr split of the real
installed script mark themselves `@pytest.mark.script_launch_mode("subprocess")`.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
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

# `make test` keeps to a few minutes on two cores: a property runs a quarter of its
# examples there, and tests marked `long` are left out. `make test-long` (run by CI after
# `make test`) sets TEST_LONG=1: every example, every test.
LONG = bool(os.environ.get("TEST_LONG"))


def examples(n: int) -> int:
    """A property's number of examples: all of them in the long run, a quarter else."""
    return n if LONG else max(5, n // 4)


# Where platformdirs (and the agents mem installs into) look for a home or its parts.
HOME_VARIABLES = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME",
                  "XDG_RUNTIME_DIR", "XDG_CONFIG_DIRS", "XDG_DATA_DIRS")
AGENT_VARIABLES = ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "COPILOT_HOME", "CLINE_DIR",
                   "CLINE_DATA_DIR", "CLINE_MCP_SETTINGS_PATH")
NO_KEYRING = "keyring.backends.fail.Keyring"  # keyring's backend that holds nothing


def home_environment(home: Path) -> dict[str, str]:
    """HOME and every XDG directory, all under `home`."""
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "XDG_CACHE_HOME": str(home / ".cache"), "XDG_RUNTIME_DIR": str(home / "run"),
            "XDG_CONFIG_DIRS": str(home / "etc-xdg"),
            "XDG_DATA_DIRS": str(home / "usr-share")}


# Named in the environment, not kept in this module: test modules import it both as
# `conftest` and as `tests.conftest`, two module objects.
SENTINEL_VARIABLE = "MEMTEST_SENTINEL_HOME"


def sentinel_home() -> Path:
    return Path(os.environ[SENTINEL_VARIABLE])


def pytest_configure(config: pytest.Config) -> None:
    """Before anything is collected, in this process and (inherited) in every worker and
    child: the run's sentinel home, never the real one."""
    sentinel = Path(tempfile.mkdtemp(prefix="mem-test-home-"))
    os.environ[SENTINEL_VARIABLE] = str(sentinel)
    os.environ.update(home_environment(sentinel))
    os.environ["PYTHON_KEYRING_BACKEND"] = NO_KEYRING
    for name in AGENT_VARIABLES:
        os.environ.pop(name, None)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(sentinel_home(), ignore_errors=True)  # what no test session checked


@pytest.fixture(scope="session", autouse=True)
def real_home_untouched() -> Iterator[None]:
    """Fail the run when anything reached a home outside a test's own: the sentinel
    must stay empty, and a child given an environment must be given a home in it."""
    original = subprocess.Popen.__init__

    def checked(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        env = kwargs.get("env")
        if env is not None and "HOME" not in env:
            raise AssertionError("a child process was started with an environment without "
                                 "HOME: it would write into the real home")
        original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "__init__", checked)
        yield
    sentinel = sentinel_home()
    leaked = sorted(str(p.relative_to(sentinel)) for p in sentinel.rglob("*"))
    shutil.rmtree(sentinel, ignore_errors=True)
    assert not leaked, f"written outside a test's own home: {leaked[:20]}"


@pytest.fixture(autouse=True)
def sealed_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    before = set(os.environ)
    for name in list(os.environ):
        if name.startswith("MEM_") or name in AGENT_VARIABLES:
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    for name, value in home_environment(home).items():
        monkeypatch.setenv(name, value)
    # Never the OS keyring of whoever runs the suite: a test that wants one sets its own.
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", NO_KEYRING)
    monkeypatch.setenv("MEM_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("MEM_VAULT", str(tmp_path / "vault"))
    monkeypatch.setenv("MEM_USER", "alice")
    monkeypatch.setenv("MEM_LOCK_TIMEOUT", "2")
    # No detached embedding child outlives a test: tests of it turn it on.
    monkeypatch.setenv("MEM_EMBEDDINGS_BACKGROUND", "false")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    # The installed `mem` script lives beside this interpreter, activated or not.
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent),
                                                os.environ.get("PATH", "")]))
    ours = set(os.environ)
    yield
    # What a test set without monkeypatch (os.environ[...] = ...) goes with it: a fixture
    # of a wider scope made next (a module's vault) must not find another test's key.
    for name in set(os.environ) - before - ours:
        if name.startswith("MEM_") or name in AGENT_VARIABLES:
            del os.environ[name]


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
