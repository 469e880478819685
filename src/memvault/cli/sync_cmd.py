"""`mem sync`: one memory on every machine, through a folder or S3-compatible remote."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from memvault.cli import context
from memvault.cli.options import JsonOpt, KeyFileOpt, OrgOpt, UserOpt, VaultOpt
from memvault.cli.output import Output
from memvault.errors import ConfigError, UsageError
from memvault.model.results import SyncAllResult, SyncResult
from memvault.text.words import counted


def sync(
    remote: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--remote", help="A folder (a path or file://) or s3://bucket/prefix; saved in "
        "config.yaml's sync: section, so later runs need no flag.",
        show_default=False)] = None,
    endpoint_url: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--endpoint-url", help="An S3-compatible service's address (MinIO, R2, B2).",
        show_default=False)] = None,
    all_users: Annotated[bool, typer.Option(
        "--all-users", help="Every user this machine holds or synced before, and every user the "
        "remote's directory names (cron).")
    ] = False,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Push what this machine has that the remote lacks, pull the rest (only ciphertext
    leaves the machine), and rebuild the search index here."""
    from memvault.ops import sync as core

    v = context.open_vault(vault, org, user, key_file, needs=None)
    cfg = v.settings.sync
    remote = core.given_remote(remote) if remote else remote  # relative to here: saved whole
    url = remote or cfg["remote"]
    if not url:
        raise UsageError("no sync remote is set: give one once (a folder or "
                         "s3://bucket/prefix)", field="remote")
    endpoint = endpoint_url or cfg["endpoint_url"]
    out = Output(json)
    # Whether the remote given can be saved as the default is known before the sync;
    # a config that names another only keeps this sync from saving it (said after).
    change, not_saved = None, None
    if remote is not None:
        try:
            change = core.remote_setting(remote, endpoint_url)
        except ConfigError as e:
            not_saved = e.message
    result = core.run(v, url, endpoint, all_users)
    # --all-users: the users left for the next run, each with its reason, and its exit code.
    problems = result.problems if isinstance(result, SyncAllResult) else ()
    if v.written:
        # What another machine stored gets its vectors here, as a local write does:
        # vectors are derived, never synced.
        from memvault.ops import background

        background.start(v.settings, v.written)
    # A user with nothing here or there, on a remote that holds others: a typo or
    # another machine's login name, not a sync that did its work (exit 66, not saved).
    unknown = isinstance(result, SyncResult) and bool(result.others)
    if change is not None and not unknown:
        out.info(f"the remote is saved in {core.remember_remote(change)}")
    if not_saved is not None:
        out.warn(f"synced, but the remote is not saved: {not_saved}")

    def human(o: Output) -> None:
        rows: list[list[object]] = [["pushed", result.pushed], ["pulled", result.pulled],
                                    ["forgotten here", result.forgotten]]
        if isinstance(result, SyncResult):
            # Erasures sent are what a user checks after a forget: never hidden in
            # "pushed", which counts records.
            rows += [[what, n] for what, n in (
                ("erasures sent", result.erasures_pushed),
                ("updates sent", result.updates_pushed),
                ("updates taken", result.updates_pulled),
                ("preferences sent", result.prefs_pushed),
                ("preferences taken", result.prefs_pulled)) if n]
        o.table(["", "count"], rows)
        if isinstance(result, SyncResult) and result.destroy_pushed:
            o.info("this machine's destroy of the user was sent: every machine erases "
                   "what it stored before it")
        if isinstance(result, SyncResult) and result.went_back:
            lacked = counted(result.went_back, 'record or erasure', 'records or erasures')
            o.warn(f"the remote lacked {lacked} "
                   "it held at the last sync (restored from an older copy, emptied, or an "
                   "object deleted): sent again")
        if result.damaged:
            o.info(f"{counted(result.damaged, 'remote object')} did not open: skipped "
                   "(one cut short is deleted, so that the machines that hold its records "
                   "send them again)")
        o.info(f"synced with {result.remote}")
        if isinstance(result, SyncResult) and result.others:
            o.warn(f"{v.who} has no memory here or at the remote, which holds "
                   f"{', '.join(result.others)}: `mem sync --all-users` brings them all, "
                   "or --user NAME (MEM_USER) chooses one")
        from memvault.cli.errors import HINTS

        for problem in problems:
            hint = f"; {HINTS[problem.hint]}" if problem.hint in HINTS else ""
            o.warn(f"{problem.org}/{problem.user}: {problem.message}{hint}")

    out.data(result, human)
    if isinstance(result, SyncAllResult) and result.exit_code:
        raise typer.Exit(result.exit_code)
    if unknown:
        from memvault.errors import EX_NOINPUT

        raise typer.Exit(EX_NOINPUT)


def register(app: typer.Typer) -> None:
    app.command()(sync)
