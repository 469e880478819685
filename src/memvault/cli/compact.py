"""`mem compact`: summarise old sessions, archive the originals (for people and for cron)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from memvault.cli import context
from memvault.cli.options import JsonOpt, KeyFileOpt, OrgOpt, UserOpt, VaultOpt
from memvault.cli.output import Output
from memvault.errors import UsageError
from memvault.text.words import counted

if TYPE_CHECKING:
    from memvault.cli.progress import Tracker
    from memvault.model.results import CompactResult


def compact(
    all_users: Annotated[bool, typer.Option(
        "--all-users", help="Every user of the org given with --org, or of every org.")
    ] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Show what would be compacted (built-in cards included); write "
        "nothing, run no external summariser.")] = False,
    summarizer: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="'builtin', or a command (run without a shell) that reads the prompt and the "
        "session on stdin and prints the summary.", show_default=False)] = None,
    jobs: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--jobs", "-j", help="Worker processes for --all-users (default: the cores).",
        show_default=False)] = None,
    shard: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="K/N: only the users of shard K (0..N-1), a stable split for N hosts.",
        show_default=False)] = None,
    session: Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
        help="Compact this session now, whatever the triggers (repeatable).",
        show_default=False)] = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Summarise old and long sessions into CLAUDE.md and move the originals to the
    encrypted archive; drop exact duplicates; finish erasure under a new key epoch."""
    from dataclasses import replace

    from memvault.ops import compact as core
    from memvault.ops.summarize import is_builtin, summarizer_argv

    if jobs is not None and not 1 <= jobs <= 256:
        raise UsageError("--jobs must be from 1 to 256")
    parts = _shard(shard) if shard is not None else None
    if parts is not None and not all_users:
        raise UsageError("--shard goes with --all-users")
    if session and all_users:
        raise UsageError("--session names one user's sessions: not with --all-users")
    core.check_sessions(session or [])
    v = context.open_vault(vault, org, user, key_file, needs=None if all_users else "user")
    whole = v.settings.sources.get("org") == "default"
    if all_users and not whole:
        context.require(v, "org")  # a mistyped org is said to be one, not 0 users
    cfg = v.settings.compaction
    if summarizer is not None:
        if not summarizer.strip():
            raise UsageError("--summarizer is empty")
        cfg = replace(cfg, summarizer=summarizer)
    if not is_builtin(cfg.summarizer):
        summarizer_argv(cfg.summarizer)  # a malformed command fails before any work
    job = core.Job(v.settings, v.master, cfg, dry_run, tuple(session or ()),
                   show_text=not all_users)
    out = Output(json)
    if all_users:
        who = core.users(job, None if whole else v.org, parts)
        with out.progress("compacting", _interrupted(dry_run, "user", "compacted")) as bar:
            outcomes = list(core.run_many(job, who, jobs or os.cpu_count() or 1, bar))
    else:
        missing = core.unknown_sessions(v, session or [])
        if missing:
            from memvault.errors import NotFound

            raise NotFound(f"no live session {missing[0]!r} for {v.who}")
        with out.progress("compacting", _interrupted(dry_run, "summary", "applied")) as bar:
            outcomes = [core.run_one(job, v.org, v.user, progress=bar)]
    result = core.summarise_outcomes(outcomes, dry_run)
    out.data(result, lambda o: _human(o, result))
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def _shard(text: str) -> tuple[int, int]:
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 0 <= int(k) < int(n) <= 1_000_000):
        raise UsageError(f"--shard {text!r}: use K/N with 0 <= K < N, e.g. 0/4")
    return int(k), int(n)


def _interrupted(dry_run: bool, noun: str, verb: str) -> Callable[[Tracker], str]:
    def line(p: Tracker) -> str:
        if dry_run:
            return "nothing was changed (a dry run)"
        return (f"{p.kept} of {counted(p.total or 0, noun)} {verb} and kept (a step cut "
                "short is finished or undone by the next command); run the same command "
                "again to resume")
    return line


def _human(o: Output, result: CompactResult) -> None:
    verb = "would compact" if result.dry_run else "compacted"
    for p in result.previews:
        o.info(f"{p.org}/{p.user}: {p.reason}: {', '.join(p.sessions)} "
               f"({counted(p.messages, 'message')}, {p.span[0][:10]} to "
               f"{p.span[1][:10]})")
        if p.summary:
            o.line("  " + " ".join(p.summary.split())[:300])
    rows = [["users", result.users], [f"sessions {verb}", result.sessions_compacted],
            ["summaries", result.summaries_added], ["facts", result.facts_added],
            ["messages archived", result.archived], ["duplicates", result.deduplicated],
            ["re-keyed", result.rekeyed]]
    rows += [[name, n] for name, n in (("busy, skipped", result.skipped_busy),
                                        ("changed, skipped", result.skipped_changed),
                                        ("summariser failed", result.summarizer_failed),
                                        ("facts over the caps, dropped",
                                         result.facts_capped),
                                        ("failed", result.failed)) if n]
    o.table(["", "count"], rows)
    for problem in result.problems:
        say = o.info if problem.problem == "frozen" else o.warn
        say(f"{problem.org}/{problem.user}: {problem.message}")


def register(app: typer.Typer) -> None:
    app.command()(compact)
