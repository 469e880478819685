"""`mem embed`: the records without a vector get one (for people, for cron beside
compaction, and as the detached child that embeds after a write)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from memvault.cli import context
from memvault.cli.options import JsonOpt, KeyFileOpt, OrgOpt, UserOpt, VaultOpt
from memvault.cli.output import Output
from memvault.errors import UsageError
from memvault.text.words import counted

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from memvault.cli.progress import Tracker
    from memvault.model.results import EmbedResult


def embed(
    rebuild: Annotated[bool, typer.Option(
        "--rebuild", help="Drop every vector and embed everything again (after changing "
        "the embeddings model).")] = False,
    all_users: Annotated[bool, typer.Option(
        "--all-users", help="Every user of the org given with --org, or of every org.")
    ] = False,
    jobs: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--jobs", "-j", help="Worker processes for --all-users (default: the cores).",
        show_default=False)] = None,
    shard: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="K/N: only the users of shard K (0..N-1), the same split as `mem compact`.",
        show_default=False)] = None,
    background: Annotated[bool, typer.Option(
        "--background", hidden=True, help="The detached child a write starts: embed the "
        "ids on stdin, at low priority, for a bounded time.")] = False,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Embed the records that have no vector yet (sealed like the records), so that
    search finds them by meaning too. Resumable: a stopped run keeps what it added."""
    from memvault.cli.compact import _shard
    from memvault.ops import embed as core

    if jobs is not None and not 1 <= jobs <= 256:
        raise UsageError("--jobs must be from 1 to 256")
    parts = _shard(shard) if shard is not None else None
    if parts is not None and not all_users:
        raise UsageError("--shard goes with --all-users")
    if background:
        _background(vault, org, user, key_file)
        return
    v = context.open_vault(vault, org, user, key_file, needs=None if all_users else "user")
    whole = v.settings.sources.get("org") == "default"
    if all_users and not whole:
        context.require(v, "org")
    job = core.Job(v.settings, v.master, rebuild)
    out = Output(json)
    if all_users:
        who = core.users(job, None if whole else v.org, parts)
        with out.progress("embedding", _interrupted("user")) as bar:
            result = core.summarise(list(core.run_many(job, who, jobs or os.cpu_count() or 1,
                                                       bar)))
    else:
        embedder = core.open_embedder(v.settings)
        with out.progress("embedding", _interrupted("record")) as bar:
            result = core.embed_pending(v, embedder, rebuild=rebuild, progress=bar)
    out.data(result, lambda o: _human(o, result))
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def _background(vault: Path | None, org: str | None, user: str | None,
                key_file: Path | None) -> None:
    """The detached child: embed what the write that started it stored (the ids on
    stdin; none: whatever is pending), within the bounds of a background run."""
    import sys

    from memvault.ops import background
    from memvault.ops import embed as core

    background.bound_this_process()
    ids = background.read_ids(sys.stdin.read(background.MAX_IDS * 64))
    v = context.open_vault(vault, org, user, key_file, needs=None)
    embedder = core.open_embedder(v.settings)
    if ids is None:
        core.embed_pending(v, embedder)
    else:
        core.embed_new(v, embedder, ids)


def _interrupted(noun: str) -> Callable[[Tracker], str]:
    def line(p: Tracker) -> str:
        return (f"{counted(p.kept, noun)} embedded and kept; run the same command again "
                "to embed the rest")
    return line


def _human(o: Output, result: EmbedResult) -> None:
    rows: list[list[object]] = [["users", result.users], ["embedded", result.embedded],
            ["pending", result.pending], ["model", result.model or "-"]]
    o.table(["", ""], rows, header=False)
    from memvault.cli.errors import HINTS

    for problem in result.problems:
        say = o.info if problem.problem == "frozen" else o.warn
        hint = f"; {HINTS[problem.hint]}" if problem.hint in HINTS else ""
        say(f"{problem.org}/{problem.user}: {problem.message}{hint}")


def register(app: typer.Typer) -> None:
    app.command()(embed)
