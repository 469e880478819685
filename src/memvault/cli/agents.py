"""Commands agents and their hooks use: ingest, brief, hook, hooks install/uninstall."""

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from memvault.cli import context
from memvault.cli.options import (
    JsonOpt,
    KeyFileOpt,
    OrgOpt,
    ProjectOpt,
    UserOpt,
    VaultOpt,
    starting,
)
from memvault.cli.output import Output
from memvault.errors import ConfigError, NotFound, UsageError
from memvault.text.words import counted

if TYPE_CHECKING:
    from memvault.cli.progress import Tracker
    from memvault.model.results import ScanResult
    from memvault.vault.vault import Vault

# The transcript formats (memvault.text.transcripts.FORMATS, which tests hold this to),
# named here so that the command's help does not import the readers.
FORMATS = ("auto", "claude-code", "codex", "gemini", "opencode", "cursor", "copilot", "qwen",
           "aider", "cline", "pi", "droid", "goose", "crush", "amp", "jsonl")
# The agents that run hooks: `mem hooks install` and `mem hook` know each.
AGENTS = ("claude-code", "codex", "gemini", "opencode", "cursor", "qwen")
SCOPES = ("user", "project")


def complete_format(incomplete: str) -> list[str]:
    return starting(FORMATS, incomplete)


def complete_agent(incomplete: str) -> list[str]:
    return starting(AGENTS, incomplete)


def complete_scope(incomplete: str) -> list[str]:
    return starting(SCOPES, incomplete)


def ingest(
    source: Annotated[Optional[str], typer.Argument(  # noqa: UP045
        help="Transcript file (an agent's database or task folder too), or - for stdin; "
        "with --scan, the folder to scan.", show_default=False)] = None,
    format_: Annotated[str, typer.Option(
        "--format", "-f", help="auto, claude-code, codex, gemini, opencode, cursor, copilot, "
        "qwen, aider, cline, pi, droid, goose, crush, amp or jsonl.",
        autocompletion=complete_format)] = "auto",
    session: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Session id (default: from the transcript, else its file name).",
        show_default=False)] = None,
    scan: Annotated[bool, typer.Option(
        "--scan", help="Ingest every transcript under the folder given that is new or has "
        "grown; without a folder, under every place an agent on this machine keeps its "
        "sessions.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Show what would be stored and the redaction report; write "
        "nothing.")] = False,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Refuse the whole session if any message holds a secret.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")]
    = False,
    project: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--project", help="Tag the messages with the project the session worked in: auto "
        "(the current directory's git work tree) or a directory.", show_default=False)]
    = None,
    embed_now: Annotated[bool, typer.Option(
        "--embed-now", hidden=True, help="A hook's detached ingest: embed what was stored "
        "in this process, not in another one.")] = False,
    then_sync: Annotated[bool, typer.Option(
        "--then-sync", hidden=True, help="Sync with the configured remote afterwards (a "
        "hook's background ingest, with sync.auto set).")] = False,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Store a transcript's messages: redacted, encrypted, searchable. Idempotent."""
    from memvault.ops import ingest as core

    if format_ not in FORMATS:
        raise UsageError(f"unknown format {format_!r}: choose one of {', '.join(FORMATS)}")
    if source is None and not scan:
        raise UsageError("give a transcript (or -), or --scan [DIR]")
    if scan and source == "-":
        raise UsageError("--scan takes a folder, not -")
    # A hook's ingest stores the session whatever the embeddings settings say.
    v = context.open_vault(vault, org, user, key_file, needs=None,
                           embeddings_optional=embed_now)
    if quiet:
        v.on_create = None  # cron mails what a quiet job prints
    tag = context.project(v, project)
    tags = (tag,) if tag else ()
    out = Output(json)
    if scan:
        if dry_run or session or project:
            raise UsageError("--scan takes neither --dry-run, --session nor --project")
        folder = Path(source) if source is not None else None
        with out.progress("ingesting", _scan_interrupted, show=not quiet) as progress:
            if folder is not None:
                summary = core.scan_dir(v, folder, format_, strict, progress)
            else:  # every agent's own places on this machine
                summary, places = core.scan_places(v, format_, strict, progress)
        _embed_stored(v, out, embed_now)
        if not quiet or json:
            def said(o: Output) -> None:
                if folder is None:
                    o.info("scanned: " + (", ".join(map(str, places)) if places else
                                          "no agent's sessions found on this machine"))
                o.info(_scanned(summary, folder or Path("the agents' folders")))

            out.data(summary, said)
        for skipped in summary.passed:
            out.warn(f"{skipped.file}: skipped: {skipped.error}")
        for error in summary.errors:
            out.warn(f"{error.file}: {error.error}")
        if summary.exit_code:
            raise typer.Exit(summary.exit_code)
        return
    assert source is not None
    with out.progress("ingesting", _ingest_interrupted(dry_run), show=not quiet) as progress:
        if source == "-":
            # Read as a stream (a Codex rollout of any size, plain or zstd), not whole.
            result = core.ingest_stream(v, sys.stdin.buffer, "stdin", None, format_,
                                        session, dry_run, strict, tags=tags,
                                        progress=progress)
        else:
            result = core.ingest_file(v, Path(source), format_, session, dry_run, strict,
                                      tags=tags, progress=progress)
    if not dry_run:
        _embed_stored(v, out, embed_now)
    remote = v.settings.sync["remote"]
    if then_sync and remote and not dry_run:
        from memvault.ops import sync

        sync.run(v, remote, v.settings.sync["endpoint_url"])
    if quiet and not json:
        return

    def human(o: Output) -> None:
        if dry_run:
            for m in result.messages:
                o.line(f"[{m.role}] {' '.join(m.content.split())[:200]}")
        verb, count = ("would add", len(result.messages)) if dry_run else \
            ("added", result.messages_added)
        updated = f", {result.messages_updated} grown" if result.messages_updated else ""
        n = result.summaries_added
        summaries = f", {counted(n, 'summary')}" if n else ""
        if result.nothing_to_keep:  # a session opened and quit, say: no error
            o.info(f"session {result.session_id}: nothing to keep")
        else:
            o.info(f"session {result.session_id}: {verb} {counted(count, 'message')}"
                   f"{updated}{summaries}, {result.messages_skipped} skipped, "
                   f"{result.withheld} withheld")
        for r in result.redactions:
            o.info(f"  {r.action} {r.count} × {r.rule}")
        if result.ignored:
            reasons = ", ".join(f"{n} × {reason}" for reason, n in result.ignored)
            o.info(f"  {counted(result.lines_ignored, 'line')} ignored: {reasons}")

    out.data(result, human)


def _embed_stored(v: "Vault", out: Output, now: bool) -> None:
    """What the ingest stored gets its vectors after it: in a detached child, or here
    when this is a hook's ingest (detached already). A failure to embed is said on
    stderr (a hook's log) and leaves the records pending: the ingest itself stands."""
    from memvault.ops import background

    if not now:
        background.start(v.settings, v.written)
        return
    if not v.written:
        return
    if v.settings.embeddings_problem:  # a hook's ingest: said in the hook's log
        out.warn(f"not embedded, left pending: {v.settings.embeddings_problem}")
        return
    if not background.wanted(v.settings):
        return
    from memvault.errors import MemError
    from memvault.ops import embed

    background.bound_this_process()
    try:
        embed.embed_new(v, embed.open_embedder(v.settings), v.written)
    except MemError as exc:
        out.warn(f"embedding after the ingest failed, left pending: {exc.message}")


def _scanned(summary: "ScanResult", folder: Path) -> str:
    """What a scan did, in one line; a scan that found nothing new says so."""
    unchanged = summary.files_unchanged
    if not summary.files_scanned:
        return f"no transcripts under {folder}"
    if not summary.files_ingested and unchanged == summary.files_scanned:
        return f"nothing new: {counted(unchanged, 'file')} unchanged since the last scan"
    seen = f" ({unchanged} unchanged since the last scan)" if unchanged else ""
    return (f"{summary.files_ingested} of {counted(summary.files_scanned, 'transcript')} "
            f"ingested{seen}, {counted(summary.messages_added, 'message')} added, "
            f"{summary.withheld} withheld")
def _scan_interrupted(p: "Tracker") -> str:
    return (f"{p.kept} of {counted(p.total or 0, 'transcript')} ingested and kept; run the "
            "same command again to resume")


def _ingest_interrupted(dry_run: bool) -> "Callable[[Tracker], str]":
    def line(p: "Tracker") -> str:
        if dry_run:
            return "nothing was stored (a dry run)"
        if not p.kept:
            return "nothing of the transcript was stored yet; run the same command again"
        return (f"{counted(p.kept, 'message')} stored and kept; run the same command again "
                "to resume (what is stored is skipped)")
    return line


def brief(
    max_entries: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="At most this many entries \\[default: 50].", show_default=False)] = None,
    max_chars: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="At most this many characters \\[default: 8000].", show_default=False)] = None,
    max_tokens: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="At most this many estimated tokens reach the agent, mem's frame included "
             "\\[default: 1500].", show_default=False)] = None,
    project: ProjectOpt = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Print the memory brief an agent receives at session start."""
    from memvault.config import BRIEF_MIN_TOKENS
    from memvault.integrations.hookbase import frame_tokens
    from memvault.ops.brief import build

    v = context.open_vault(vault, org, user, key_file)
    entries = max_entries if max_entries is not None else v.settings.values["brief_max_entries"]
    chars = max_chars if max_chars is not None else v.settings.values["brief_max_chars"]
    tokens = max_tokens if max_tokens is not None else v.settings.brief_max_tokens
    if entries < 1 or chars < 100 or tokens < BRIEF_MIN_TOKENS:
        raise UsageError(f"--max-entries must be at least 1, --max-chars at least 100 and "
                         f"--max-tokens at least {BRIEF_MIN_TOKENS}")
    out = Output(json)
    # A damaged document fails it (the hook skips it). The frame's tokens are left out
    # of the budget as the hook leaves them: the same entries as at session start.
    result = build(v, entries, chars, prefer_tag=context.project(v, project),
                   max_tokens=tokens - frame_tokens())

    def human(o: Output) -> None:
        if result.brief:
            o.text(result.brief)
        else:
            o.info("nothing to brief yet: add preferences, facts or context first")

    out.data(result, human)


hook_app = typer.Typer(help="Hook handlers that agents call (always exit 0).",
                       no_args_is_help=True)


def _hook_command(module: str, label: str) -> Callable[..., None]:
    """`mem hook AGENT`: the agent's module imported only when its hook runs."""
    def hook(vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
             key_file: KeyFileOpt = None) -> None:
        import importlib

        run = importlib.import_module(f"memvault.integrations.{module}").run
        run(lambda: context.settings(vault, org, user, key_file, embeddings_optional=True))

    article = "an" if label[0] in "AEIOU" else "a"
    hook.__doc__ = f"Read {article} {label} hook event on stdin and act on it; never fails " \
        "the agent."
    return hook


for _name, _module, _label in (("claude-code", "claude_code", "Claude Code"),
                               ("codex", "codex", "Codex CLI"),
                               ("gemini", "gemini", "Gemini CLI"),
                               ("opencode", "opencode", "OpenCode"),
                               ("cursor", "cursor", "Cursor"),
                               ("qwen", "qwen", "Qwen Code")):
    hook_app.command(_name)(_hook_command(_module, _label))


hooks_app = typer.Typer(help="Install mem's hooks into an agent's settings.",
                        no_args_is_help=True)
AgentArg = Annotated[str, typer.Argument(
    help="The agent: claude-code, codex, gemini, opencode, cursor or qwen.",
    autocompletion=complete_agent)]
ScopeOpt = Annotated[str, typer.Option(
    help="user (your home) or project (this directory; committed files name `mem` from "
    "PATH).", autocompletion=complete_scope)]
SettingsOpt = Annotated[Optional[Path], typer.Option(  # noqa: UP045
    "--settings", help="A hooks settings file to edit instead (OpenCode: the config that "
    "takes the server; its plugin goes in plugins/).", show_default=False)]
McpOpt = Annotated[bool, typer.Option(
    "--mcp", help="Register mem's MCP server (`mem mcp`) with the agent too.")]


@hooks_app.command("install")
def hooks_install(
    agent: AgentArg, scope: ScopeOpt = "user", settings: SettingsOpt = None,
    mcp: McpOpt = False, json: JsonOpt = False,
) -> None:
    """Add mem's session-start and session-end hooks (idempotent, with a backup)."""
    module = _integration(agent)
    _check_scope(scope)
    result = module.install(module.settings_path(scope, settings), scope, mcp)

    def human(o: Output) -> None:
        o.info(f"hooks {'installed' if result.changed else 'already installed'} in "
               f"{result.settings}" + (f" (backup: {result.backup})" if result.backup else ""))
        server = result.mcp
        if server is not None:
            o.info(f"MCP server {'registered' if server.changed else 'already registered'} "
                   f"in {server.settings}" +
                   (f" (backup: {server.backup})" if server.backup else ""))
        elif mcp and "mcp" in result.events:
            o.info(f"MCP server registered in {result.settings}")
        note = getattr(module, "TRUST_NOTE", None)
        if note and (result.changed or server is not None and server.changed):
            o.info(note)

    Output(json).data(result, human)


@hooks_app.command("uninstall")
def hooks_uninstall(
    agent: AgentArg, scope: ScopeOpt = "user", settings: SettingsOpt = None,
    mcp: McpOpt = False, json: JsonOpt = False,
) -> None:
    """Remove mem's hooks (and with --mcp its server), leaving everything else as it was."""
    module = _integration(agent)
    _check_scope(scope)
    result = module.uninstall(module.settings_path(scope, settings), scope, mcp)
    Output(json).data(result, lambda o: o.info(
        f"hooks {'removed from' if result.changed else 'were not in'} {result.settings}"))


def _check_scope(scope: str) -> None:
    """The project scope edits files in the current directory: one that is gone (or
    cannot be named) is one line, not a crash."""
    if scope == "project":
        import os

        try:
            os.getcwd()
        except OSError as exc:
            raise NotFound(f"the current directory cannot be used ({exc.strerror}): "
                           "run this in the project's directory") from None


def _integration(agent: str) -> Any:
    """The integration module of an agent (imported only when asked for)."""
    import importlib

    if agent not in AGENTS:
        raise UsageError(f"unknown agent {agent!r}: mem installs hooks for "
                         f"{', '.join(AGENTS)}")
    return importlib.import_module(f"memvault.integrations.{agent.replace('-', '_')}")


def mcp(
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None,
) -> None:
    r"""Serve memory tools to an agent over MCP (stdio). Needs `pip install 'memvault\[mcp]'`."""
    import importlib.util

    from memvault.errors import MemError

    try:
        if importlib.util.find_spec("mcp") is None:
            raise ConfigError("mem mcp needs the MCP SDK, which is not installed: "
                              "pip install 'memvault[mcp]' (or pipx inject memvault mcp)")
        # Opened before serving (and before the SDK's import): no key or a bad config is
        # one line on stderr and its exit code, not a server that fails every call.
        # The server keeps its own answers for a user with no memory yet (empty ones).
        opened = context.open_vault(vault, org, user, key_file, needs=None)
        opened.on_create = None  # the server's stderr is a log: it says nothing of this
    except MemError as exc:
        # An agent shows a server that did not start as a bare "disconnected" (or not at
        # all): the hook log says why, and for whom.
        _log_server_failure(exc, vault, org, user, key_file)
        raise
    from memvault.integrations.mcp_server import serve

    serve(opened)


def _log_server_failure(exc: Exception, vault: Path | None, org: str | None,
                        user: str | None, key_file: Path | None) -> None:
    from memvault.errors import MemError
    from memvault.integrations.hookbase import log

    try:
        settings = context.settings(vault, org, user, key_file)
        who = f"user {settings.user} of org {settings.org} in vault {settings.vault}"
    except MemError:
        settings, who = None, "settings that do not resolve"
    code = getattr(exc, "exit_code", 1)
    log(settings, "mcp", "start", f"server not started for {who} ({type(exc).__name__}, "
        f"exit {code}): {getattr(exc, 'message', exc)}")


def register(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(brief)
    app.add_typer(hook_app, name="hook")
    app.add_typer(hooks_app, name="hooks")
    app.command()(mcp)
