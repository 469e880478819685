"""Generated files are fresh, and every command documents itself.

completions/ and docs/cli.md are produced by scripts/generate.py from the installed
`mem`; when a command, an option or a help text changes they must be regenerated
(`make completions`), or this test fails.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from pytest_console_scripts import ScriptRunner
from typer.testing import CliRunner

from memvault.cli import app
from memvault.model.records import CATEGORIES
from tests.conftest import mem

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "scripts" / "generate.py"
# Options Typer adds by itself; their help is Typer's.
BUILTIN = {"help", "install_completion", "show_completion"}


def run_generator(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GENERATOR), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)


def commands() -> Iterator[tuple[str, Any]]:
    def walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
        yield " ".join(("mem", *path)), command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, (*path, name))

    yield from walk(typer.main.get_command(app), ())


def test_generated_files_are_fresh() -> None:
    result = run_generator("--check")
    assert result.returncode == 0, (
        "generated files are stale; run `make completions`:\n" + result.stderr
    )


@pytest.mark.long
def test_check_mode_lists_stale_files_and_writes_nothing(tmp_path: Path) -> None:
    written = run_generator("--output-dir", str(tmp_path))
    assert written.returncode == 0, written.stderr
    for rel in ("docs/cli.md", "completions/mem.bash", "completions/mem.zsh",
                "completions/mem.fish"):
        assert (tmp_path / rel).stat().st_size > 0, rel
    assert run_generator("--check", "--output-dir", str(tmp_path)).returncode == 0

    (tmp_path / "completions" / "mem.fish").write_text("# stale\n")
    (tmp_path / "docs" / "cli.md").unlink()
    result = run_generator("--check", "--output-dir", str(tmp_path))
    assert result.returncode == 1
    assert "completions/mem.fish" in result.stderr and "docs/cli.md" in result.stderr
    assert "completions/mem.bash" not in result.stderr
    assert (tmp_path / "completions" / "mem.fish").read_text() == "# stale\n"
    assert not (tmp_path / "docs" / "cli.md").exists()


def test_cli_reference_covers_every_command() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for name, command in commands():
        if not getattr(command, "hidden", False):
            assert f"\n## {name}\n" in doc, f"{name} is missing from docs/cli.md"


@pytest.mark.parametrize("name", [name for name, _ in commands()])
def test_every_command_has_help(name: str) -> None:
    command = dict(commands())[name]
    text = (command.help or command.short_help or "").strip()
    assert text, f"`{name}` has no help text"
    for param in command.params:
        if param.name in BUILTIN:
            continue
        assert (getattr(param, "help", None) or "").strip(), (
            f"`{name}` parameter {param.name!r} has no help text"
        )


# Rich reads `[word]` in a help string as markup and drops it (`memvault[mcp]` was shown as
# `memvault`); `\[` is its escape. What a help string holds in brackets must be shown.
BRACKETED = re.compile(r"\\?\[[^\]\n]*\]")


def test_bracketed_help_text_is_shown_as_written() -> None:
    runner = CliRunner()
    wide = {"COLUMNS": "1000", "NO_COLOR": "1", "TERM": "dumb"}  # nothing wraps
    seen: set[tuple[str, str]] = set()  # a text renders alike wherever it is: check it once
    for name, command in commands():
        texts = [("help", command.help), ("help", command.epilog)]
        texts += [("param", getattr(p, "help", None)) for p in command.params]
        # A group lists its commands with the first paragraph of their help.
        texts += [("listed", (sub.short_help or sub.help or "").split("\n\n")[0])
                  for sub in getattr(command, "commands", {}).values()]
        due = [(kind, text) for kind, text in texts
               if text and BRACKETED.search(text) and (kind, text) not in seen]
        if not due:
            continue
        result = runner.invoke(app, [*name.split()[1:], "--help"], env=wide, prog_name="mem")
        assert result.exit_code == 0, result.output
        shown = " ".join(result.stdout.split())
        for kind, text in due:
            seen.add((kind, text))
            for found in BRACKETED.findall(text):
                literal = " ".join(found.replace("\\[", "[").split())
                assert literal in shown, f"`{name} --help` does not show {literal!r}"
    assert ("help", dict(commands())["mem mcp"].help) in seen


def complete(script_runner: ScriptRunner, words: str) -> list[str]:
    """What the shell's completion offers for the last word of `words`, asked the way
    completions/mem.bash asks `mem` (the words in the environment)."""
    done = mem(script_runner, _MEM_COMPLETE="complete_bash", COMP_WORDS=words,
               COMP_CWORD=str(len(words.split(" ")) - 1))
    assert done.returncode == 0, done.stderr
    return list(done.stdout.split())


def test_completion_offers_the_fixed_choices(script_runner: ScriptRunner) -> None:
    def offered(words: str) -> list[str]:
        return complete(script_runner, words)

    assert offered("mem hooks install ") == ["claude-code", "codex", "gemini", "opencode",
                                             "cursor", "qwen"]
    assert offered("mem hooks uninstall c") == ["claude-code", "codex", "cursor"]
    assert offered("mem hooks install codex --scope ") == ["user", "project"]
    assert offered("mem add note --type p") == ["preference", "pattern"]
    assert offered("mem search --category ") == list(CATEGORIES)
    # Every format of the registry, "auto" first (the CLI's copy is held to it).
    from memvault.text.transcripts import FORMATS

    formats = offered("mem ingest --format ")
    assert formats[0] == "auto" and sorted(formats[1:]) == sorted(FORMATS)
    assert sorted(offered("mem ingest --format c")) == sorted(
        f for f in FORMATS if f.startswith("c"))
    assert offered("mem export --format ") == ["json", "markdown"]
    assert "hooks" in offered("mem ho")
