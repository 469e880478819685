"""The user's rights: forget, export, import, destroy, freeze, unfreeze, audit, rotate-key."""

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from mem.cli import context, render
from mem.cli.options import JsonOpt, KeyFileOpt, OrgOpt, UserOpt, VaultOpt
from mem.errors import DataError, NotFound, Refused, UsageError
from mem.output import Output


def forget(
    ids: Annotated[Optional[list[str]], typer.Argument(  # noqa: UP045
        help="Ids of the records to forget.", show_default=False)] = None,
    session: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Everything from this session.", show_default=False)] = None,
    before: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Everything created before this ISO-8601 date.", show_default=False)] = None,
    tag: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Everything with this tag.", show_default=False)] = None,
    query: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Everything a search finds (shown first; asks before deleting).",
        show_default=False)] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would go.")] = False,
    now: Annotated[bool, typer.Option(
        "--now", help="Also re-encrypt under a new key epoch at once, so that no old copy "
        "(backup, snapshot, SSD block) can be decrypted.")] = False,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Erase records from every file and from the index; print a receipt."""
    from mem import lifecycle as core
    from mem.records import parse_time

    v = context.open_vault(vault, org, user, key_file)
    targets = core.select(v, ids or [], session, parse_time(before) if before else None,
                          tag, query)
    out = Output(json)
    if not targets:
        raise NotFound("nothing matches: no record was forgotten")
    if dry_run or (query is not None and not yes):
        preview = [r.to_dict() for r in targets]
        if dry_run or not sys.stdin.isatty():
            out.data({"dry_run": True, "would_delete": len(preview),
                      "memory_ids": [r["memory_id"] for r in preview]},
                     lambda o: render.records_table(o, preview))
            if not dry_run:
                raise Refused("--query deletes only with --yes or an interactive confirmation")
            return
        render.records_table(out, preview)
        if not typer.confirm(f"Forget these {len(preview)} records for good?", err=True):
            raise Refused("nothing was forgotten")
    doc = core.forget(v, targets, now=now)
    out.data(doc, lambda o: o.info(
        f"forgot {doc['deleted_count']} records; rewrote {len(doc['files_rewritten'])} files; "
        f"audit {doc['audit_id']}"))


def export(
    format_: Annotated[str, typer.Option("--format", help="json or markdown.")] = "json",
    output: Annotated[str, typer.Option(
        "--output", "-o", help="File to write (created 0600), or - for stdout.")] = "-",
    category: Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
        "--category", "-c", help="Only this category (repeatable).", show_default=False)]
    = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None,
) -> None:
    """Export all of the user's memory in plaintext (JSON or Markdown)."""
    import json as jsonlib

    from mem import lifecycle as core

    if format_ not in ("json", "markdown"):
        raise UsageError("--format must be json or markdown")
    doc = core.export(context.open_vault(vault, org, user, key_file), category)
    text = jsonlib.dumps(doc, ensure_ascii=False, indent=2) + "\n" if format_ == "json" \
        else core.to_markdown(doc)
    if output == "-":
        sys.stdout.write(text)
    else:
        core.write_export(text, output)
        Output().info(f"exported {doc['record_count']} records to {output}")


def import_(
    file: Annotated[Path, typer.Argument(help="A mem JSON export.")],
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Restore an export: records keep their ids; importing twice adds nothing."""
    from mem import lifecycle as core

    try:
        raw = file.read_text()
    except FileNotFoundError:
        raise NotFound(f"no file at {file}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {file}: {exc}") from None
    doc = core.import_file(context.open_vault(vault, org, user, key_file), raw)
    Output(json).data(doc, lambda o: o.info(
        f"imported {doc['imported']} records, skipped {doc['skipped']} already present"))


def destroy(
    confirm: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="The user's name, to confirm.", show_default=False)] = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Delete all of a user's memory, index and keys for good (needs --confirm USER)."""
    from mem import lifecycle as core

    doc = core.destroy(context.open_vault(vault, org, user, key_file), confirm)
    Output(json).data(doc, lambda o: o.info(
        f"destroyed {doc['destroyed']}: {doc['records_deleted']} records, "
        f"{doc['files_deleted']} files; audit {doc['audit_id']}"))


def freeze(
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Refuse every write to the user's memory until `mem unfreeze`; reads still work."""
    from mem import lifecycle as core

    doc = core.set_frozen(context.open_vault(vault, org, user, key_file), True)
    Output(json).data(doc, lambda o: o.info("frozen: writes are refused"))


def unfreeze(
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Allow writes again."""
    from mem import lifecycle as core

    doc = core.set_frozen(context.open_vault(vault, org, user, key_file), False)
    Output(json).data(doc, lambda o: o.info("unfrozen: writes are allowed"))


def audit(
    limit: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--limit", "-n", help="Only the newest N entries \\[default: 50 in the table, all "
        "with --json].", show_default=False)] = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """List the audit log (operations, times, actors, ids; never content)."""
    from mem import lifecycle as core

    doc = core.audit_log(context.open_vault(vault, org, user, key_file))
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
    from mem import lifecycle as core

    doc = core.rotate_key(context.open_vault(vault, org, user, key_file), now)
    Output(json).data(doc, lambda o: o.info(
        f"key version {doc['key_version']}; re-encrypted {doc['files_reencrypted']} files; "
        f"deleted keys {doc['keys_deleted'] or 'none'}"))


def register(app: typer.Typer) -> None:
    app.command()(forget)
    app.command()(export)
    app.command("import")(import_)
    app.command()(destroy)
    app.command()(freeze)
    app.command()(unfreeze)
    app.command()(audit)
    app.command("rotate-key")(rotate_key)
