"""See what the memory holds: `mem browse` (the full-screen viewer, cli/viewer.py) and
`mem review` (its review queue, for scripts and agents)."""

from typing import Annotated, Optional

import typer

from memvault.cli import context
from memvault.cli.options import JsonOpt, KeyFileOpt, OrgOpt, UserOpt, VaultOpt, starting
from memvault.cli.output import Output
from memvault.errors import ConfigError, UsageError
from memvault.text.sanitize import for_terminal
from memvault.text.words import counted

# Bidirectional controls and Unicode tag characters, shown as text: a stored U+202E
# would turn the rest of a line around on screen and hide what it says.
_INVISIBLE = {c: f"\\u{c:04x}" for c in [*range(0x202a, 0x202f), *range(0x2066, 0x206a),
                                           0x200e, 0x200f, 0x061c]}
_INVISIBLE.update({c: f"\\U{c:08x}" for c in range(0xE0000, 0xE0080)})


def shown(text: str) -> str:
    """Stored text as the terminal may show it: control characters (escape sequences)
    and bidirectional controls made visible, never sent raw (every stored string the
    viewer and `mem review` print goes through here, then into a rich Text)."""
    return for_terminal(text).translate(_INVISIBLE)


def _complete_kind(incomplete: str) -> list[str]:
    from memvault.model.review_results import KINDS

    return starting(KINDS, incomplete)


def review(
    kind: Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
        "--kind", "-k", help="Only this kind of finding (repeatable): duplicate, "
        "near_duplicate, superseded_in_fact, noise, unused.", show_default=False,
        autocompletion=_complete_kind)] = None,
    unused_days: Annotated[int, typer.Option(
        "--unused-days", help="A memory is unused when stored longer ago than this and "
        "retrieved on none of these last days.")] = 90,
    all_: Annotated[bool, typer.Option(
        "--all", help="List the findings kept earlier too.")] = False,
    keep: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--keep", help="Keep what the finding with this key names: it is not proposed "
        "again.", show_default=False)] = None,
    merge: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--merge", help="Merge the finding with this key (a duplicate or a superseded "
        "fact): the memory it keeps stays current, the others are superseded by it.",
        show_default=False)] = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """List what is probably junk in the memory: duplicates, facts stated again with
    another value, harness or tool noise, memories nothing retrieves.

    Each finding has a key: `--keep KEY` or `--merge KEY` decides on it, and `mem forget
    ID...` forgets what it names. Nothing changes without one of those."""
    from memvault.model.review_results import KINDS
    from memvault.ops import review as core

    if keep is not None and merge is not None:
        raise UsageError("give --keep or --merge, not both")
    kinds = kind or list(KINDS)
    v = context.open_vault(vault, org, user, key_file)
    out = Output(json)
    if keep is not None or merge is not None:
        item = core.find(v, keep or merge or "", unused_days)
        decision = core.keep(v, item) if keep is not None else core.merge(v, item)
        out.data(decision, lambda o: o.info(
            f"kept {item.key}: not proposed again" if keep is not None else
            f"merged {item.key}: {item.keep} stays, "
            f"{counted(len(decision.superseded), 'memory', 'memories')} superseded by it"))
        return
    result = core.queue(v, unused_days, kinds, include_kept=all_)

    def human(o: Output) -> None:
        from rich.text import Text

        if result.notice:
            o.info(f"note: {result.notice}")
        for item in result.items:
            o.out.print(Text(f"{item.key}  {item.kind}  {shown(item.reason)}"), soft_wrap=True)
            for r in item.records:
                mark = "keep " if r.memory_id == item.keep else "     "
                flat = " ".join(shown(r.content).split())
                flat = flat if len(flat) <= 100 else flat[:99] + "…"
                o.out.print(Text(f"  {mark}{r.memory_id}  {r.type}  {flat}"), soft_wrap=True)
        o.info(f"{counted(len(result.items), 'finding')} in "
               f"{counted(result.memories_checked, 'memory', 'memories')}"
               + (f"; {result.kept_hidden} kept earlier (--all lists them)"
                  if result.kept_hidden else ""))

    out.data(result, human)


def browse(
    read_only: Annotated[bool, typer.Option(
        "--read-only", help="Open with every action (forget, correct, retag, add, freeze, "
        "merge) disabled.")] = False,
    query: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--query", "-q", help="Start with this search.", show_default=False)] = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None,
) -> None:
    """Search, read, correct and forget in a full-screen viewer (keys on screen).

    Needs the browse extra: pip install 'memvault\\[browse]'."""
    import sys

    try:
        import textual  # noqa: F401 - the optional extra, checked before the vault opens
    except ImportError:
        raise ConfigError("mem browse needs the viewer's library: pip install "
                          "'memvault[browse]' (or uv tool install 'memvault[browse]')"
                          ) from None
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("mem browse needs a terminal; for scripts, use mem search, "
                         "mem list or mem review --json")
    v = context.open_vault(vault, org, user, key_file)
    from memvault.cli.viewer import Viewer

    app = Viewer(v, read_only=read_only, query=query or "")
    app.run()
    if app.failure is not None:  # to the error boundary, the terminal given back
        raise app.failure


def register(app: typer.Typer) -> None:
    app.command()(browse)
    app.command()(review)
