"""Start-up: a run imports and builds only the command it names, and what it leaves out
changes nothing a user sees. (The time itself is measured by bench/bench_startup.py, not
here.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from memvault import cli
from memvault.vault.vault import Vault
from tests.test_generated import ROOT

MEM = Path(sys.executable).parent / "mem"
# Libraries a command imports only when it uses them (rich renders tables and help; the
# rest belong to other commands or to help formats mem does not use).
HEAVY = ("rich", "yaml", "platformdirs", "phonenumbers", "zstandard", "tomlkit", "pydantic",
         "mcp", "markdown_it", "pygments", "attr")
OTHER_COMMANDS = ("memvault.cli.agents", "memvault.cli.lifecycle", "memvault.cli.compact",
                  "memvault.cli.pref", "memvault.cli.config_cmd", "memvault.integrations",
                  "memvault.ops.ingest", "memvault.ops.compact", "memvault.ops.portability",
                  "memvault.model.results")  # thirty dataclasses add does not return


def imported_by(*args: str) -> set[str]:
    """The modules a real `mem ARGS` run has imported when it ends."""
    code = ("import atexit, json, sys\n"
            "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
            f"sys.argv = ['mem', *{list(args)!r}]\n"
            "from memvault.cli import main\n"
            "main()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stderr.splitlines()[-1]))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules for n in names if m == n or m.startswith(n + "."))


def test_add_imports_neither_heavy_libraries_nor_other_commands(vault: Vault) -> None:
    # The user's first write also says it created them (once, through Rich): not timed.
    imported_by("add", "Works on the billing service", "--type", "fact")
    modules = imported_by("add", "Prefers short answers", "--type", "preference")
    assert "memvault.ops.remember" in modules  # it did run
    assert loaded(modules, HEAVY + OTHER_COMMANDS) == []


def test_help_leaves_out_what_help_does_not_use() -> None:
    modules = imported_by("--help")
    assert "rich.console" in modules
    assert loaded(modules, ("markdown_it", "pygments", "attr", "rich.markdown",
                            "rich.traceback", "memvault.ops", "tantivy", "cryptography")) == []


def described(command: Any) -> dict[str, Any]:
    """What a command is to a user: its help, its parameters as parsed and shown, and the
    same of its subcommands."""
    params = [{k: repr(getattr(p, k, None)) for k in (
        "name", "opts", "secondary_opts", "help", "default", "required", "multiple", "nargs",
        "is_flag", "envvar", "metavar", "hidden", "show_default", "is_eager")}
        | {"type": (type(p.type).__name__, p.type.name)} for p in command.params]
    return {"help": command.help, "short_help": command.short_help, "epilog": command.epilog,
            "hidden": command.hidden, "no_args_is_help": command.no_args_is_help,
            "params": params, "commands": {name: described(sub) for name, sub in
                                           getattr(command, "commands", {}).items()}}


def test_each_command_alone_is_the_command_of_the_whole_app() -> None:
    whole = cli.build()
    names = list(typer.main.get_command(whole).commands)  # type: ignore[attr-defined]
    assert sorted(names) == sorted(n for group in cli.MODULES.values() for n in group)
    for name in names:
        alone = cli.build(name)
        assert list(typer.main.get_command(alone).commands) == [name]  # type: ignore[attr-defined]
        assert described(typer.main.get_command(alone)) == described(
            typer.main.get_command(whole)) | {"commands": {name: described(
                typer.main.get_command(whole).commands[name])}}, name  # type: ignore[attr-defined]


@pytest.mark.parametrize("args", [[], ["hooks", "install"]])
def test_the_installed_script_prints_the_reference_help(args: list[str]) -> None:
    """`mem [ARGS] --help` as a user runs it (one command built, rich's unused parts left
    out) prints what docs/cli.md holds (the whole app, rendered by Typer as it is)."""
    done = subprocess.run([str(MEM), *args, "--help"], capture_output=True, text=True,
                          timeout=120, check=False,
                          env={"PATH": os.environ["PATH"], "HOME": os.environ["HOME"],
                               "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "100",
                               "PYTHONIOENCODING": "utf-8"})  # as scripts/generate.py
    assert done.returncode == 0, done.stderr
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = doc.split(f"\n## {' '.join(['mem', *args])}\n", 1)[1]
    expected = section.split("```text\n", 1)[1].split("\n```", 1)[0]
    shown = "\n".join(line.rstrip() for line in done.stdout.splitlines()).strip("\n")
    assert shown == expected
