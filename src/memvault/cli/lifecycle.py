"""The user's rights: forget, export, import, destroy, freeze, unfreeze, audit, rotate-key."""

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from memvault.cli import context, render
from memvault.cli.options import (
    JsonOpt,
    KeyFileOpt,
    OrgOpt,
    UserOpt,
    VaultOpt,
    complete_category,
    complete_export_format,
)
from memvault.cli.output import Output
from memvault.errors import NotFound, Refused
from memvault.text.words import counted

if TYPE_CHECKING:
    from collections.abc import Callable

    from memvault.cli.progress import Tracker


def forget(
    ids: Annotated[Optional[list[str]], typer.Argument(  # noqa: UP045
        help="Ids of the records to forget (or unique prefixes of them, 8 characters or "
        "more).", show_default=False)] = None,
    session: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Everything from this session.", show_default=False)] = None,
    before: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Everything created before this date or time: ISO-8601 or a phrase "
        "(\"last month\", \"90 days ago\": before the start of the time it names).",
        show_default=False)] = None,
    tag: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Everything with this tag.", show_default=False)] = None,
    query: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Every record holding any of these words (stemmed; a \"quoted phrase\" as "
        "written) in its own text, archived and superseded records included, however "
        "many: never by meaning, speaker or date (the set `mem search Q --mode words "
        "--include-archive --include-superseded` lists). Shown first; asks before "
        "deleting; - reads the words from stdin.",
        show_default=False)] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    all_matches: Annotated[bool, typer.Option(
        "--all-matches", help="Let --query take more than a tenth of the records (and "
        "more than 20) without typing their count; without it --yes does not.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would go.")] = False,
    now: Annotated[bool, typer.Option(
        "--now", help="Also re-encrypt under a new key epoch at once, so that no old copy "
        "(backup, snapshot, SSD block) can be decrypted.")] = False,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Erase records from every file and from the index; print a receipt."""
    from memvault.ops import forget as core

    if query == "-":
        query = context.stdin_text("the query")
    cutoff = context.date_flag(before, "before")
    v = context.open_vault(vault, org, user, key_file)
    plan = core.select(v, v.resolve_ids(ids or []), session, cutoff, tag, query)
    out = Output(json)
    if not plan.targets:
        raise NotFound("nothing matches: no record was forgotten")
    # A query taking a large share of the memory is asked again by count, --yes or not.
    broad = plan.broad and not all_matches
    if dry_run or (query is not None and (not yes or broad)):
        preview = [r.to_dict() for r in plan.targets]
        count = len(preview)

        def show(o: Output) -> None:
            render.records_table(o, preview)
            if plan.remade:
                o.info(f"summaries made again without them: {', '.join(plan.remade)}")
            if broad and dry_run:
                o.info(f"this takes {count} of the {counted(plan.held, 'record')}: "
                       "forgetting them asks for their count, or --all-matches")

        if dry_run or not sys.stdin.isatty():
            out.data(plan, show)
            if dry_run:
                return
            if broad:
                raise Refused(f"--query takes {count} of the {counted(plan.held, 'record')}, "
                              "more than a tenth: nothing was forgotten; pass "
                              "--all-matches to take them all")
            raise Refused("--query deletes only with --yes or an interactive confirmation")
        show(out)
        if broad:
            typed = typer.prompt(f"Type {count} to forget these "
                                 f"{counted(count, 'record')} for good",
                                 default="", show_default=False, err=True)
            if typed.strip() != str(count):
                raise Refused("nothing was forgotten")
        elif not typer.confirm(f"Forget {'this' if count == 1 else 'these'} "
                               f"{counted(count, 'record')} for good?", err=True):
            raise Refused("nothing was forgotten")
    result = core.forget(v, plan, now=now)
    out.data(result, lambda o: o.info(
        f"forgot {counted(result.deleted_count, 'record')}; rewrote "
        f"{counted(len(result.files_rewritten), 'file')}; audit {result.audit_id}"))


def export(
    format_: Annotated[str, typer.Option("--format", help="json or markdown.",
                                         autocompletion=complete_export_format)] = "json",
    output: Annotated[str, typer.Option(
        "--output", "-o", help="File to write (created 0600), or - for stdout.")] = "-",
    force: Annotated[bool, typer.Option(
        "--force", help="Replace a file that exists at --output.")] = False,
    category: Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
        "--category", "-c", help="Only this category (repeatable).", show_default=False,
        autocompletion=complete_category)]
    = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None,
) -> None:
    """Export all of the user's memory in plaintext (JSON or Markdown)."""
    from memvault.ops import portability as core

    if output != "-":
        core.check_output(Path(output), force)  # before a passphrase is asked for
    v = context.open_vault(vault, org, user, key_file)
    out = Output()
    if output == "-":
        with out.progress("exporting", _export_interrupted(None), stdout_busy=True) as bar:
            core.export(v, sys.stdout, format_, category, bar)
        return
    with out.progress("exporting", _export_interrupted(output)) as bar:
        result = core.export_to_file(v, Path(output), format_, category, bar, force)
    out.info(f"exported {counted(result.record_count, 'record')} to {output}")


def _export_interrupted(output: str | None) -> "Callable[[Tracker], str]":
    def line(p: "Tracker") -> str:
        if output is None:
            return "the export on stdout is cut short; run the same command again"
        return (f"nothing was written to {output} (an export is put in place only once "
                "complete); run the same command again")
    return line


def import_(
    file: Annotated[Path, typer.Argument(help="A mem JSON export.")],
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Restore an export: records keep their ids; importing twice adds nothing."""
    from memvault.ops import portability as core

    raw = core.read_import(file)
    out = Output(json)
    with out.progress("importing", _import_interrupted) as bar:
        opened = context.open_vault(vault, org, user, key_file, needs=None)
        result = core.import_text(opened, raw, bar)
    out.data(result, lambda o: o.info(
        f"imported {counted(result.imported, 'record')}, skipped {result.skipped} already "
        "present"))


def _import_interrupted(p: "Tracker") -> str:
    if p.stages < 2:  # still screening: nothing written
        return "nothing was imported; run the same command again"
    return ("the import was cut short while it stored records; run the same command "
            "again: what it stored is kept and skipped, the rest is added")


def destroy(
    confirm: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="The user's name, to confirm.", show_default=False)] = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Delete all of a user's memory, index and keys for good (needs --confirm USER)."""
    from memvault.ops import admin

    result = admin.destroy(context.open_vault(vault, org, user, key_file), confirm)
    Output(json).data(result, lambda o: o.info(
        f"destroyed {result.destroyed}: {counted(result.records_deleted, 'record')}, "
        f"{counted(result.files_deleted, 'file')}; audit {result.audit_id}"))


def freeze(
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Refuse every write to the user's memory until `mem unfreeze`; reads still work."""
    from memvault.ops import admin

    result = admin.set_frozen(context.open_vault(vault, org, user, key_file), True)
    Output(json).data(result, lambda o: o.info("frozen: writes are refused"))


def unfreeze(
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Allow writes again."""
    from memvault.ops import admin

    result = admin.set_frozen(context.open_vault(vault, org, user, key_file), False)
    Output(json).data(result, lambda o: o.info("unfrozen: writes are allowed"))


def audit(
    limit: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--limit", "-n", help="Only the newest N entries \\[default: 50 in the table, all "
        "with --json].", show_default=False)] = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """List the audit log (operations, times, actors, ids; never content)."""
    from memvault.ops import admin

    doc = admin.audit_log(context.open_vault(vault, org, user, key_file)).to_dict()
    if limit is not None:
        doc["entries"] = doc["entries"][-limit:] if limit > 0 else []

    def human(o: Output) -> None:
        o.table(["seq", "time", "operation", "actor", "ids"],
                [[e["seq"], e["ts"][:19].replace("T", " "), e["op"], e["actor"], len(e["ids"])]
                 for e in doc["entries"][-(limit or 50):]])
        o.info("chain ok" if doc["chain_ok"] else "CHAIN BROKEN: run `mem verify`")

    Output(json).data(doc, human)
    if not doc["chain_ok"]:
        raise typer.Exit(65)


def rotate_key(
    now: Annotated[bool, typer.Option(
        "--now", help="Re-encrypt everything at once and delete the old key.")] = False,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Start a new data-key epoch for the user."""
    from memvault.ops import keys

    out = Output(json)
    with out.progress("re-encrypting", _rotate_interrupted(now)) as bar:
        result = keys.rotate_key(context.open_vault(vault, org, user, key_file), now, bar)
    out.data(result, lambda o: o.info(
        f"key version {result.key_version}; re-encrypted "
        f"{counted(result.files_reencrypted, 'file')}; "
        f"deleted keys {list(result.keys_deleted) or 'none'}"))


def _rotate_interrupted(now: bool) -> "Callable[[Tracker], str]":
    def line(p: "Tracker") -> str:
        if now and p.stages:
            return (f"re-encryption under the new key stopped after {p.done} of "
                    f"{counted(p.total or 0, 'file')}; the next write to this memory "
                    "finishes it, or run "
                    "the same command again")
        return "no file is half written; run the same command again"
    return line


def register(app: typer.Typer) -> None:
    app.command()(forget)
    app.command()(export)
    app.command("import")(import_)
    app.command()(destroy)
    app.command()(freeze)
    app.command()(unfreeze)
    app.command()(audit)
    app.command("rotate-key")(rotate_key)
