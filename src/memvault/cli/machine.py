"""This machine: `mem setup` (mem in the agents found here) and `mem doctor` (is it all
working)."""

import sys
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from memvault.cli import context
from memvault.cli.options import JsonOpt, KeyFileOpt, OrgOpt, UserOpt, VaultOpt, starting
from memvault.cli.output import Output
from memvault.errors import Refused, UsageError

if TYPE_CHECKING:
    from memvault.model.results import AgentSetup, DoctorResult, Finding, SetupResult

ENTRY_WORDS = {"mcp": "MCP server mem", "features.codex_hooks": "[features] codex_hooks = true"}


def complete_agent(incomplete: str) -> list[str]:
    from memvault.integrations.agents_found import BY_NAME

    return starting(BY_NAME, incomplete)


def setup(
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Show what would change; change nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    undo: Annotated[bool, typer.Option(
        "--undo", help="Take mem's hooks and MCP server out of every agent again (and "
        "nothing else).")] = False,
    agent: Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
        "--agent", help="Only this agent: claude-code, codex, gemini, opencode, cursor, "
        "copilot, qwen, cline, goose, crush or amp (repeatable).",
        autocompletion=complete_agent, show_default=False)] = None,
    json: JsonOpt = False,
) -> None:
    """Set up mem in the agents found here (Claude Code, Codex CLI, Gemini CLI, OpenCode,
    Cursor, Copilot CLI, Qwen Code, Cline, Goose, Crush, Amp).

    For each agent on PATH or with its settings folder: mem's hooks (the brief at session
    start, the transcript kept at the end) where the agent runs hooks, and its MCP server,
    in your user settings, in the form the agent's release runs (its --version is asked).
    Shows the changes and asks once; each changed file keeps a backup beside it. An agent
    not found is skipped, and so are Claude Code's hooks and server where the mem plugin
    is enabled (it brings them).

    Without a terminal to ask on it changes nothing and exits 2, unless given -y. An agent
    whose settings mem cannot edit safely (a file that is not valid JSON or TOML) is left
    as it was, the others are set up, and the exit code is that error's (2, or 78).
    """
    from memvault.integrations import agents_found, wiring

    out = Output(json)
    unknown = [name for name in agent or () if name not in agents_found.BY_NAME]
    if unknown:
        raise UsageError(f"unknown agent {unknown[0]!r} (--agent): use "
                         f"{', '.join(agents_found.BY_NAME)}")
    specs = tuple(s for s in agents_found.AGENTS if not agent or s.name in agent)
    found = agents_found.detect(specs, versions=not undo)  # taking out needs no release
    plan = wiring.setup(found, undo=undo, dry_run=True)
    if dry_run or not plan.changed:
        out.data(plan, lambda o: _show_setup(o, plan))
        _exit(plan.exit_code)
        return
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("mem setup asks before it changes the agents' settings, and "
                             "there is no terminal to ask on: pass -y to go ahead, or "
                             "--dry-run to see the changes")
        _show_setup(Output(), plan)
        if not typer.confirm("Make these changes?", err=True):
            raise Refused("nothing was changed")
    done = wiring.setup(found, undo=undo)
    out.data(done, lambda o: _show_setup(o, done))
    _exit(done.exit_code)


def _show_setup(o: Output, result: "SetupResult") -> None:
    for agent in result.agents:
        _show_agent(o, agent, result)
    for note in result.notes:
        o.info(f"note: {note}")
    if result.changed:
        return
    if result.undo:
        o.info("nothing to take out: mem is in no agent's settings")
    elif not any(agent.found for agent in result.agents):
        o.info("no agent found here: install one (Claude Code, Codex CLI, Gemini CLI, "
               "OpenCode, Cursor, Copilot CLI, Qwen Code, Cline, Goose, Crush or Amp), then "
               "run mem setup again")
    elif not any(agent.error for agent in result.agents):
        o.info("nothing to change: mem is set up in every agent found")


def _show_agent(o: Output, agent: "AgentSetup", result: "SetupResult") -> None:
    if not agent.found and not agent.changes and not agent.error:
        o.info(f"{agent.label}: not found" + ("" if result.undo else " (skipped)"))
        return
    head = f"{agent.label} {agent.version}" if agent.version else agent.label
    o.info(head + (f" ({agent.binary})" if agent.binary else ""))
    for change in agent.changes:
        verb = ("would take out of" if change.action == "remove" else "would add to") \
            if result.dry_run else ("took out of" if change.action == "remove" else "added to")
        what = _entries(change.entries)
        backup = f" (backup: {change.backup})" if change.backup else ""
        o.info(f"  {verb} {change.file}: {what}{backup}")
    if agent.found and not agent.changes and not agent.error:
        o.info("  nothing to change" if not result.undo else "  nothing of mem's there")
    if agent.error:
        o.warn(f"  {agent.label} left as it was: {agent.error}")
    for note in agent.notes:
        if agent.found:
            o.info(f"  note: {note}")


def _entries(entries: tuple[str, ...]) -> str:
    events = [e for e in entries if e not in ENTRY_WORDS]
    words = [f"hooks {', '.join(events)}"] if events else []
    words += [ENTRY_WORDS[e] for e in entries if e in ENTRY_WORDS]
    return "; ".join(words)


def doctor(
    strict: Annotated[bool, typer.Option(
        "--strict", help="Exit 1 on a warning too.")] = False,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Check that mem works here: one line per finding, with the command that fixes it.

    Checks the key (where it comes from; a passphrase-protected key file is not opened),
    the vault and the user, the index, the messages waiting for compaction and the last
    compaction, disk use, each agent (release, mem's hooks and MCP server) and the hooks'
    recent failures. It changes no memory and shows none.

    Exit codes: 0 healthy, or warnings only; 1 a warning with --strict; on an error, the
    error's code: 78 configuration (no key, a key file others can read, a bad config
    file), 77 a key that does not open the vault, 66 no vault, 65 a damaged vault or
    state, 75 the user's lock is held.
    """
    from memvault.integrations import wiring
    from memvault.ops import doctor as core

    result = core.diagnose(lambda: context.settings(vault, org, user, key_file),
                           wiring.CHECKS)
    given = [f"--{name}={value}" for name, value in
             (("vault", vault), ("org", org), ("user", user), ("key-file", key_file))
             if value is not None]
    doc = {"ok": result.ok,
           "findings": [{**f.to_dict(), "fix": fix_text(f, given)} for f in result.findings]}
    Output(json).data(doc, lambda o: _show_doctor(o, result, given))
    _exit(result.exit_code(strict))


def fix_text(finding: "Finding", given: list[str] | None = None) -> str | None:
    """The command (or step) that sets a finding right, as a user types it; mem's own
    commands carry the --vault, --org, --user and --key-file the doctor was given."""
    from memvault.integrations.agents_found import BY_NAME

    fix, subject = finding.fix, finding.subject
    if fix is None:
        return None
    if fix == "upgrade" and subject in BY_NAME:
        return BY_NAME[subject].upgrade
    if fix == "undo" and subject in BY_NAME:  # setup's entries, beside what else brings mem
        return f"mem setup --undo --agent {subject}"
    if fix == "chmod" and subject:
        import shlex

        return f"chmod 600 {shlex.quote(subject)}"
    text = FIXES.get(fix)
    if text is None:  # a step in words, as the error it came from says it (the keyring's)
        from memvault.cli.errors import HINTS

        return HINTS.get(fix)
    if text.startswith("mem ") and not text.startswith("mem setup") and given:  # it takes none
        text = " ".join([text, *given])
    return text


# A finding's symbolic fix, as a command line (ops/doctor.py, integrations/wiring.py).
FIXES = {
    "init": "mem init", "no-key": "mem init", "reindex": "mem reindex",
    "compact": "mem compact", "sync": "mem sync", "setup": "mem setup",
    "repair": "mem verify --repair", "embed": "mem embed",
    "embed-rebuild": "mem embed --rebuild",
    "rebuild-state": "mem verify --repair", "unfreeze": "mem unfreeze",
    "restore-key": "mem key restore FILE", "key-backup": "mem key backup --output FILE",
    "key-source": "keep the key in a file without a passphrase (MEM_KEY_FILE), or behind "
                  "MEM_KEY_COMMAND",
    # The agent's MCP server cannot be given MEM_MASTER_KEY (integrations/launch.py).
    "key-not-forwarded": "keep the key in a key file (MEM_KEY_FILE) or behind "
                         "MEM_KEY_COMMAND instead of MEM_MASTER_KEY, then run mem setup",
}


def _show_doctor(o: Output, result: "DoctorResult", given: list[str]) -> None:
    for finding in result.findings:
        fix = fix_text(finding, given)
        o.line(f"{finding.severity:<8} {finding.what}" + (f" -> {fix}" if fix else ""))
    warnings = sum(1 for f in result.findings if f.severity == "warning")
    errors = sum(1 for f in result.findings if f.severity == "error")
    if result.ok:
        o.info("all good")
    else:
        o.info(f"{errors} error{'s' * (errors != 1)}, {warnings} warning"
               f"{'s' * (warnings != 1)}")


def _exit(code: int) -> None:
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command()(setup)
    app.command()(doctor)
