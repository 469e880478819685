"""Configuration precedence: flag > MEM_* environment > config file > default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memvault.config import resolve
from memvault.errors import ConfigError, UsageError
from tests.conftest import mem


def write_config(config_dir: Path, text: str) -> None:
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.yaml").write_text(text)


def test_precedence(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEM_USER")
    monkeypatch.delenv("MEM_LOCK_TIMEOUT")
    write_config(config_dir, "user: fromfile\norg: fileorg\nlock_timeout: 3\n")
    s = resolve()
    assert (s.user, s.org, s.lock_timeout) == ("fromfile", "fileorg", 3.0)
    assert s.sources["user"].startswith("file ")
    monkeypatch.setenv("MEM_USER", "fromenv")
    s = resolve()
    assert s.user == "fromenv" and s.sources["user"] == "env MEM_USER"
    s = resolve(user="fromflag")
    assert s.user == "fromflag" and s.sources["user"] == "flag --user"
    assert s.org == "fileorg"  # other settings keep their own source
    assert s.sources["lock_timeout"].startswith("file ")


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEM_USER")
    s = resolve()
    assert s.org == "default" and s.sources["org"] == "default"
    assert s.sources["user"] == "default (login name)"


@pytest.mark.parametrize(
    "text", ["user: [unclosed", "- a list\n- not a mapping\n", "valut: /tmp/typo\n",
             "lock_timeout: soon\n"],
)
def test_bad_config_file_is_a_config_error(
    config_dir: Path, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEM_LOCK_TIMEOUT")
    write_config(config_dir, text)
    with pytest.raises(ConfigError):
        resolve()


@pytest.mark.parametrize("name", ["../etc", "a/b", "", ".", "..", "-x", "x" * 65, "sp ace"])
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(UsageError):
        resolve(user=name)
    with pytest.raises(UsageError):
        resolve(org=name)


def test_the_mcp_limits_resolve_with_the_defaults_budget_documents():
    from memvault.ops.budget import Limits

    assert Limits.from_settings(resolve()) == Limits()


def test_the_compaction_defaults_resolve_to_what_compaction_config_documents():
    """The COMPACTION table and CompactionConfig's field defaults say the same thing."""
    from memvault.config import CompactionConfig

    assert resolve().compaction == CompactionConfig()


def test_config_show_gives_a_mapping_setting_as_a_mapping(script_runner, config_dir):
    config_dir.mkdir(exist_ok=True)
    (config_dir / "config.yaml").write_text("compaction:\n  archive_after_days: 30\n")
    result = mem(script_runner, "config", "show", "--json")
    settings = json.loads(result.stdout)["settings"]
    assert settings["compaction"]["value"]["archive_after_days"] == 30
    assert settings["compaction"]["source"].startswith("file ")
    assert settings["mcp"]["value"]["max_stores"] == 20


def test_config_show_gives_each_setting_of_a_mapping_a_line_and_nothing_as_none(
        script_runner, config_dir):
    """For people: `compaction.archive_after_days  30  file …` on a line of its own (a
    grep finds it), unset values as "-", booleans as config.yaml writes them."""
    config_dir.mkdir(exist_ok=True)
    (config_dir / "config.yaml").write_text("compaction:\n  archive_after_days: 30\n"
                                            "sync:\n  auto: true\n")
    lines = mem(script_runner, "config", "show").stdout.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows["compaction.archive_after_days"][0] == "30"
    assert rows["compaction.archive_after_days"][1] == "file"
    assert rows["compaction.summarizer_prompt"][0] == "-"
    assert rows["sync.auto"][0] == "true"
    # A default that resolves is shown resolved: the key file mem would read.
    assert rows["key_file"][:2] == [str(config_dir / "master.key"), "default"]
    assert "compaction" not in rows and not any("None" in line for line in lines)
