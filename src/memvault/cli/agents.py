"""Commands agents and their hooks use: ingest, brief, hook, hooks install/uninstall."""

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from memvault.cli import context
from memvault.cli.options import JsonOpt, KeyFileOpt, OrgOpt, UserOpt, VaultOpt
from memvault.cli.output import Output
from memvault.errors import UsageError

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
    from memvault.ops import ingest as core

    if format_ not in FORMATS:
        raise UsageError(f"unknown format {format_!r}: choose one of {', '.join(FORMATS)}")
    if (source is None) == (scan is None):
        raise UsageError("give a transcript (or -) or --scan DIR, not both")
    v = context.open_vault(vault, org, user, key_file)
    out = Output(json)
    if scan is not None:
        if dry_run or session:
            raise UsageError("--scan takes neither --dry-run nor --session")
        summary = core.scan_dir(v, scan, format_, strict)
        if not quiet or json:
            out.data(summary, lambda o: o.info(
                f"{summary.files_ingested} of {summary.files_scanned} transcripts ingested, "
                f"{summary.messages_added} messages added, {summary.withheld} withheld"))
        for skipped in summary.passed:
            out.warn(f"{skipped.file}: skipped: {skipped.error}")
        for error in summary.errors:
            out.warn(f"{error.file}: {error.error}")
        if summary.exit_code:
            raise typer.Exit(summary.exit_code)
        return
    assert source is not None
    if source == "-":
        # Read as a stream (a Codex rollout of any size, plain or zstd), not whole.
        result = core.ingest_stream(v, sys.stdin.buffer, "stdin", None, format_, session,
                                    dry_run, strict)
    else:
        result = core.ingest_file(v, Path(source), format_, session, dry_run, strict)
    if quiet and not json:
        return

    def human(o: Output) -> None:
        if dry_run:
            for m in result.messages:
                o.line(f"[{m.role}] {' '.join(m.content.split())[:200]}")
        verb, count = ("would add", len(result.messages)) if dry_run else \
            ("added", result.messages_added)
        updated = f", {result.messages_updated} grown" if result.messages_updated else ""
        summaries = f", {result.summaries_added} summaries" if result.summaries_added else ""
        o.info(f"session {result.session_id}: {verb} {count} messages{updated}{summaries}, "
               f"{result.messages_skipped} skipped, {result.withheld} withheld")
        for r in result.redactions:
            o.info(f"  {r.action} {r.count} × {r.rule}")
        if result.ignored:
            reasons = ", ".join(f"{n} {reason}" for reason, n in result.ignored)
            o.info(f"  {result.lines_ignored} lines ignored: {reasons}")

    out.data(result, human)


def brief(
    max_entries: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="At most this many entries \\[default: 50].", show_default=False)] = None,
    max_chars: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="At most this many characters \\[default: 8000].", show_default=False)] = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Print the memory brief an agent receives at session start."""
    from memvault.ops.brief import build

    v = context.open_vault(vault, org, user, key_file)
    entries = max_entries if max_entries is not None else v.settings.values["brief_max_entries"]
    chars = max_chars if max_chars is not None else v.settings.values["brief_max_chars"]
    if entries < 1 or chars < 100:
        raise UsageError("--max-entries must be at least 1 and --max-chars at least 100")
    out = Output(json)
    result = build(v, entries, chars)  # a damaged document fails it (the hook skips it)

    def human(o: Output) -> None:
        if result.brief:
            o.text(result.brief)
        else:
            o.info("nothing to brief yet: add preferences, facts or context first")

    out.data(result, human)


hook_app = typer.Typer(help="Hook handlers that agents call (always exit 0).",
                       no_args_is_help=True)


@hook_app.command("claude-code")
def hook_claude_code(
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None,
) -> None:
    """Read a Claude Code hook event on stdin and act on it; never fails the agent."""
    from memvault.integrations.claude_code import run

    run(lambda: context.settings(vault, org, user, key_file))


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
    from memvault.integrations.claude_code import install, settings_path

    _check_agent(agent)
    result = install(settings_path(scope, settings))
    Output(json).data(result, lambda o: o.info(
        f"hooks {'installed' if result.changed else 'already installed'} in "
        f"{result.settings}" + (f" (backup: {result.backup})" if result.backup else "")))


@hooks_app.command("uninstall")
def hooks_uninstall(
    agent: Annotated[str, typer.Argument(help="The agent: claude-code.")],
    scope: ScopeOpt = "user", settings: SettingsOpt = None, json: JsonOpt = False,
) -> None:
    """Remove mem's hooks, leaving every other hook as it was."""
    from memvault.integrations.claude_code import settings_path, uninstall

    _check_agent(agent)
    result = uninstall(settings_path(scope, settings))
    Output(json).data(result, lambda o: o.info(
        f"hooks {'removed from' if result.changed else 'were not in'} {result.settings}"))


def _check_agent(agent: str) -> None:
    if agent != "claude-code":
        raise UsageError(f"unknown agent {agent!r}: mem installs hooks for claude-code")


def register(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(brief)
    app.add_typer(hook_app, name="hook")
    app.add_typer(hooks_app, name="hooks")
