"""Top-level commands: init, add, show, list, search, reindex, stats, verify."""

import sys
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from memvault.cli import context, render
from memvault.cli.options import (
    AfterOpt,
    AgentOpt,
    ArchiveOpt,
    BeforeOpt,
    CategoryOpt,
    JsonOpt,
    KeyFileOpt,
    KeyringOpt,
    OrgOpt,
    ProjectOpt,
    SessionOpt,
    SupersededOpt,
    TagOpt,
    TypeOpt,
    UserOpt,
    VaultOpt,
    complete_type,
)
from memvault.cli.output import Output
from memvault.errors import UsageError
from memvault.text.words import counted

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from memvault.cli.progress import Tracker
    from memvault.model.records import Filters


def init(
    passphrase: Annotated[bool, typer.Option(
        "--passphrase", help="Protect the new key file with a passphrase (asked on the "
        "terminal; for interactive use, never for cron).")] = False,
    keyring: KeyringOpt = False,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Create the vault and its master key (the only command that ever creates a key)."""
    from memvault.ops import admin

    if keyring and (passphrase or key_file is not None):
        raise UsageError("--keyring keeps the key in the OS keyring: it takes no "
                         f"{'--passphrase' if passphrase else '--key-file'}")
    secret = None
    if passphrase:
        if not sys.stdin.isatty():
            raise UsageError("--passphrase needs a terminal to ask for the passphrase")
        import getpass

        from memvault.crypto.keys import check_passphrase

        secret = check_passphrase(getpass.getpass("New passphrase: "))
        if secret != getpass.getpass("Repeat passphrase: "):
            raise UsageError("the passphrases differ; nothing was created")
    result = admin.init(context.settings(vault, org, user, key_file, keyring),
                        passphrase=secret)
    out = Output(json)
    if not result.created:
        out.info(f"vault already initialised at {result.vault}")
    doc = result.to_dict()
    out.data(doc, lambda o: render.mapping(o, doc, "mem vault"))
    if result.config_file:
        out.info(f"key_source: keyring written to {result.config_file}, so that every mem "
                 "command looks for the key there")
    if result.created:
        where = f"is in {result.key_file}" if result.key_file else \
            f"comes from {result.key_source}"
        out.info(f"the master key {where}: without it nothing in the vault can be read, "
                 "and no one can recover it")
        out.info("back it up now: `mem key backup --output FILE` wraps it under a "
                 "passphrase; keep that file off this machine")
    elif result.backup is not None and not result.backup.backed_up:
        out.info("the master key has no backup on record: `mem key backup --output FILE`")


def add(
    text: Annotated[str, typer.Argument(
        help="What to remember, or - to read stdin. Text that starts with - goes after "
        "--: mem add -- '-rf removes a tree'.")],
    type_: Annotated[str, typer.Option(
        "--type", "-t", help="fact, preference, instruction, correction, context, pattern, "
        "summary or message.", autocompletion=complete_type)] = "fact",
    tag: Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
        "--tag", help="A tag (repeatable).", show_default=False)] = None,
    importance: Annotated[float, typer.Option(help="0 to 1.")] = 0.5,
    session: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Session id (required for messages).", show_default=False)] = None,
    supersedes: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Id of the entry this one replaces.", show_default=False)] = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Remember one thing; print its id. Identical content is stored once."""
    from memvault.ops import remember

    if text == "-":
        text = context.stdin_text("the text")
    v = context.open_vault(vault, org, user, key_file, needs=None)
    result = remember.add(v, text, type_, tags=tag, importance=importance, session=session,
                          supersedes=supersedes)
    from memvault.ops import background

    background.start(v.settings, v.written)  # its vector, after the answer's work

    def human(o: Output) -> None:
        if result.deduplicated:
            o.info("already stored; nothing added")
        elif result.restated:
            o.info("said again: current again" + (
                f", replacing {result.record.supersedes}" if result.record.supersedes else ""))
        o.line(result.record.memory_id)

    Output(json).data(result, human)


def show(
    memory_id: Annotated[str, typer.Argument(
        help="The record's id, or a unique prefix of it (8 characters or more).")],
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Show one record in full."""
    from memvault.ops import recall

    doc = recall.show(context.open_vault(vault, org, user, key_file), memory_id).to_dict()
    Output(json).data(doc, lambda o: render.record_detail(o, doc))


def list_(
    type_: TypeOpt = None, category: CategoryOpt = None, tag: TagOpt = None,
    session: SessionOpt = None, agent: AgentOpt = None, after: AfterOpt = None,
    before: BeforeOpt = None,
    include_archive: ArchiveOpt = False, include_superseded: SupersededOpt = False,
    limit: Annotated[int, typer.Option("--limit", "-n", help="At most this many.")] = 50,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """List records, newest first."""
    from memvault.ops import recall

    filters = context.filters(type_, category, tag, session, after, before,
                              include_archive, include_superseded, limit, agent=agent)
    doc = recall.list_records(context.open_vault(vault, org, user, key_file),
                              filters).to_dict()
    Output(json).data(doc, lambda o: render.records_table(o, doc["records"]))


def search(
    query: Annotated[Optional[str], typer.Argument(  # noqa: UP045
        help="Words, a question, or \"quoted phrases\"; - reads them from stdin. Empty: "
        "the most recent items.",
        show_default=False)] = None,
    type_: TypeOpt = None, category: CategoryOpt = None, tag: TagOpt = None,
    session: SessionOpt = None, agent: AgentOpt = None, after: AfterOpt = None,
    before: BeforeOpt = None,
    include_archive: ArchiveOpt = False, include_superseded: SupersededOpt = False,
    limit: Annotated[int, typer.Option("--limit", "-n", help="At most this many.")] = 10,
    project: ProjectOpt = None,
    mode: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--mode", help="Rank by words (lexical), by meaning (semantic) or both (hybrid); "
        "words: only the records holding a word of the query in their own text (not by "
        "speaker, day or neighbouring turns), what forget --query takes. "
        "Default: hybrid when the memory has vectors of the configured embeddings model, "
        "else lexical.", show_default=False,
        autocompletion=lambda incomplete: [m for m in ("lexical", "semantic", "hybrid",
                                                       "words")
                                           if m.startswith(incomplete)])] = None,
    as_of: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--as-of", help="Search as of this date or time (ISO-8601 or a phrase such as "
        "\"yesterday\" or \"last week\": the end of the day or week it names): later "
        "records are left out, and phrases in the query and in --after/--before count "
        "from it (default: now).", show_default=False)] = None,
    weak: Annotated[bool, typer.Option(
        "--all", help="Also the weaker results, under the relevance floor: after the "
        "matches, marked weak.")] = False,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Search the user's memory, best matches first; "no match" when nothing clears the
    relevance floor."""
    from memvault.ops import recall

    if query == "-":
        query = context.stdin_text("the query")
    recall.check_mode(mode)
    now = context.date_flag(as_of, "as_of", end=True)
    filters = context.filters(type_, category, tag, session, after, before,
                              include_archive, include_superseded, limit, now, agent)
    now = _moment(now, filters)
    v = context.open_vault(vault, org, user, key_file)
    prefer = context.project(v, project)
    result = recall.search_preferring(v, query or "", filters, prefer, now, mode, weak) \
        if prefer else recall.search(v, query or "", filters, now=now, mode=mode, weak=weak)
    doc = result.to_dict()
    out = Output(json)
    if result.notice:
        out.info(f"note: {result.notice}")
    if result.no_words:
        out.warn(f"the query {query!r} has no words to search for: nothing was searched")
    elif all(h.weak for h in result.results):
        out.info("no match")  # on stderr: stdout holds results only (none, or the weak)
    if json or result.results:
        out.data(doc, lambda o: render.search_results(o, doc["results"]))


def _moment(as_of: "datetime | None", filters: "Filters") -> "datetime":
    """The moment a search is asked at: now, or `--as-of`, after which records are left
    out."""
    from datetime import UTC, datetime, timedelta

    if as_of is None:
        return datetime.now().astimezone()
    try:
        cut = as_of + timedelta(microseconds=1)
        cut.astimezone(UTC)
    except OverflowError:  # the last instant there is: nothing is later
        return as_of
    if filters.before is None or cut < filters.before:
        filters.before = cut
    return as_of


def reindex(
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Rebuild the user's search index from the vault."""
    from memvault.ops import admin

    result = admin.reindex(context.open_vault(vault, org, user, key_file))
    Output(json).data(result, lambda o: o.info(
        f"index rebuilt: {counted(result.documents, 'record')}"))


def stats(
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Counts and sizes for the user's memory (zeros before the vault's first write)."""
    from memvault.ops import admin

    v = context.open_vault(vault, org, user, key_file, needs=None)
    if not admin.before_first_write(v):
        context.require(v, "user")  # a mistyped name is said to be one, with its source
    doc = admin.stats(v).to_dict()
    Output(json).data(doc, lambda o: render.mapping(o, doc, f"{doc['org']}/{doc['user']}"))


def verify(
    repair: Annotated[bool, typer.Option(
        "--repair", help="Cut torn tails, drop unused keys and temp files, recount, rebuild "
        "the index (under the lock), then verify.")] = False,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Decrypt every file and record and check the audit chain (exit 65 on any problem)."""
    from memvault.cli.errors import HINTS
    from memvault.ops import verify as core

    v = context.open_vault(vault, org, user, key_file)
    out = Output(json)
    with out.progress("verifying", _verify_interrupted(repair)) as progress:
        repaired = core.repair(v).repaired if repair else None
        result = core.verify(v, repaired, progress)

    def human(o: Output) -> None:
        for action in repaired or ():
            o.info(f"repaired: {action}")
        for p in result.problems:
            where = p.file + (f":{p.line}" if p.line else "")
            fix = f"; {HINTS['repair']}" if p.repairable else ""
            o.line(f"{p.severity}: {where}: {p.problem}{fix}")
        o.info(f"{'ok' if result.ok else 'PROBLEMS FOUND'}: "
               f"{counted(result.files_checked, 'file')}, "
               f"{counted(result.records_checked, 'record')} checked")

    out.data(result, human)
    if not result.ok:
        raise typer.Exit(65)


def _verify_interrupted(repair: bool) -> "Callable[[Tracker], str]":
    def line(p: "Tracker") -> str:
        if repair and not p.stages:  # still repairing: each step is a write of its own
            return ("the repair stopped between two of its steps; what it set right is "
                    "kept; run the same command again to finish it")
        checked = f"{p.done} of {counted(p.total, 'file')} checked" if p.total is not None else \
            "nothing checked"
        return f"{checked}, nothing changed by the check; run the same command again"
    return line


def register(app: typer.Typer) -> None:
    app.command()(init)
    app.command()(add)
    app.command()(show)
    app.command("list")(list_)
    app.command()(search)
    app.command()(reindex)
    app.command()(stats)
    app.command()(verify)
