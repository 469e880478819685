"""Commands agents and their hooks use: ingest, brief, hook, hooks install/uninstall."""

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from mem.cli import context
from mem.cli.options import JsonOpt, KeyFileOpt, OrgOpt, UserOpt, VaultOpt
from mem.errors import UsageError
from mem.output import Output

FORMATS = ("auto", "claude-code", "codex", "gemini", "jsonl")


def ingest(
    source: Annotated[Optional[str], typer.Argument(  # noqa: UP045
        help="Transcript file, or - for stdin.", show_default=False)] = None,
    format_: Annotated[str, typer.Option(
        "--format", "-f", help="auto, claude-code, codex, gemini or jsonl.")] = "auto",
    session: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Session id (default: from the transcript, else its file name).",
        show_default=False)] = None,
    scan: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--scan", help="Ingest every transcript under this folder that is new or has grown.",
        show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Show what would be stored and the redaction report; write "
        "nothing.")] = False,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Refuse the whole session if any message holds a secret.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")]
    = False,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Store a transcript's messages: redacted, encrypted, searchable. Idempotent."""
    from mem import ingest as core

    if format_ not in FORMATS:
        raise UsageError(f"unknown format {format_!r}: choose one of {', '.join(FORMATS)}")
    if (source is None) == (scan is None):
        raise UsageError("give a transcript (or -) or --scan DIR, not both")
    v = context.open_vault(vault, org, user, key_file)
    out = Output(json)
    if scan is not None:
        if dry_run or session:
            raise UsageError("--scan takes neither --dry-run nor --session")
        doc = core.scan_dir(v, scan, format_, strict)
        if not quiet or json:
            out.data(doc, lambda o: o.info(
                f"{doc['files_ingested']} of {doc['files_scanned']} transcripts ingested, "
                f"{doc['messages_added']} messages added, {doc['withheld']} withheld"))
        for error in doc["errors"]:
            out.warn(f"{error['file']}: {error['error']}")
        if doc["errors"]:
            raise typer.Exit(65)
        return
    assert source is not None
    doc = core.ingest(v, source, format_, session, dry_run, strict)
    if quiet and not json:
        return

    def human(o: Output) -> None:
        if dry_run:
            for m in doc["messages"]:
                o.line(f"[{m['role']}] {' '.join(m['content'].split())[:200]}")
        verb, count = ("would add", len(doc["messages"])) if dry_run else \
            ("added", doc["messages_added"])
        o.info(f"session {doc['session_id']}: {verb} {count} messages, "
               f"{doc['messages_skipped']} skipped, {doc['withheld']} withheld")
        for r in doc["redactions"]:
            o.info(f"  redacted {r['count']} × {r['rule']}")

    out.data(doc, human)


def brief(
    max_entries: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="At most this many entries \\[default: 50].", show_default=False)] = None,
    max_chars: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="At most this many characters \\[default: 8000].", show_default=False)] = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Print the memory brief an agent receives at session start."""
    from mem.brief import build

    v = context.open_vault(vault, org, user, key_file)
    entries = max_entries if max_entries is not None else v.settings.values["brief_max_entries"]
    chars = max_chars if max_chars is not None else v.settings.values["brief_max_chars"]
    if entries < 1 or chars < 100:
        raise UsageError("--max-entries must be at least 1 and --max-chars at least 100")
    doc = build(v, entries, chars)

    def human(o: Output) -> None:
        if doc["brief"]:
            sys.stdout.write(doc["brief"])
        else:
            o.info("nothing to brief yet: add preferences, facts or context first")

    Output(json).data(doc, human)


hook_app = typer.Typer(help="Hook handlers that agents call (always exit 0).",
                       no_args_is_help=True)


@hook_app.command("claude-code")
def hook_claude_code(
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None,
) -> None:
    """Read a Claude Code hook event on stdin and act on it; never fails the agent."""
    from mem.hooks import handle_claude_code

    try:
        stdin = sys.stdin.read()
    except (OSError, UnicodeDecodeError):
        stdin = ""
    output = handle_claude_code(lambda: context.settings(vault, org, user, key_file), stdin)
    if output:
        sys.stdout.write(output + "\n")


hooks_app = typer.Typer(help="Install mem's hooks into an agent's settings.",
                        no_args_is_help=True)
ScopeOpt = Annotated[str, typer.Option(help="user (~/.claude) or project (./.claude).")]
SettingsOpt = Annotated[Optional[Path], typer.Option(  # noqa: UP045
    "--settings", help="A settings.json to edit instead.", show_default=False)]


@hooks_app.command("install")
def hooks_install(
    agent: Annotated[str, typer.Argument(help="The agent: claude-code.")],
    scope: ScopeOpt = "user", settings: SettingsOpt = None, json: JsonOpt = False,
) -> None:
    """Add mem's SessionStart, SessionEnd and PreCompact hooks (idempotent, with a backup)."""
    from mem.hooks import install, settings_path

    _check_agent(agent)
    doc = install(settings_path(scope, settings))
    Output(json).data(doc, lambda o: o.info(
        f"hooks {'installed' if doc['changed'] else 'already installed'} in "
        f"{doc['settings']}" + (f" (backup: {doc['backup']})" if doc["backup"] else "")))


@hooks_app.command("uninstall")
def hooks_uninstall(
    agent: Annotated[str, typer.Argument(help="The agent: claude-code.")],
    scope: ScopeOpt = "user", settings: SettingsOpt = None, json: JsonOpt = False,
) -> None:
    """Remove mem's hooks, leaving every other hook as it was."""
    from mem.hooks import settings_path, uninstall

    _check_agent(agent)
    doc = uninstall(settings_path(scope, settings))
    Output(json).data(doc, lambda o: o.info(
        f"hooks {'removed from' if doc['changed'] else 'were not in'} {doc['settings']}"))


def _check_agent(agent: str) -> None:
    if agent != "claude-code":
        raise UsageError(f"unknown agent {agent!r}: mem installs hooks for claude-code")


def register(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(brief)
    app.add_typer(hook_app, name="hook")
    app.add_typer(hooks_app, name="hooks")
