"""`mem browse`: the full-screen viewer (Textual, the optional extra `memvault[browse]`,
imported by this command alone).

Every read and write goes through the operations layer the other commands use, with the
vault opened as they open it (cli/context.py): search is `recall.search` (the same
ranking, modes and filters as `mem search`), forget is `forget.select` then
`forget.forget` (shown first, asked once), correct is `remember.add --supersedes`,
retag, keep and merge are `ops/review.py`, freeze is `admin.set_frozen`. The viewer holds
no lock between actions and keeps nothing when it ends. Its own reads are audited like
any other (as browse.*), and count as a person's look, not a retrieval (`mem review`).

Everything stored that is shown goes through `browse.shown` (control characters and
bidirectional controls made visible) into a rich Text, never markup.
"""

from __future__ import annotations

import shlex
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import DataTable, Input, Static, TabbedContent, TabPane

from memvault.cli.browse import shown
from memvault.errors import MemError, UsageError
from memvault.text.words import counted

W = TypeVar("W", bound=Widget)

if TYPE_CHECKING:
    from textual.timer import Timer

    from memvault.model.record_results import SearchHit
    from memvault.model.records import Filters, Record
    from memvault.model.review_results import ReviewItem
    from memvault.vault.vault import Vault

# Results are listed a page at a time: the next page is searched for when the cursor
# reaches the end of the list (the list draws only the rows on screen), so a keystroke
# costs one page whatever the memory holds.
PAGE = 50
# The detail pane is drawn once the typing rests this long (seconds; longer than the
# time between two keys of someone typing), or the cursor, which moves faster.
TYPING_WAIT = 0.3
CURSOR_WAIT = 0.05
MAX_RESULTS = 10_000
TEXT_CELL = 100  # characters of a record's text in its row (the pane shows it whole)

KEYS = {
    "search": "Enter/Esc list  / search  f filters  d forget  space mark  S forget "
              "session  c correct  t tags  T type  a add  z freeze  1-5 screens  q quit",
    "timeline": "Enter open session  D forget session  1-5 screens  q quit",
    "review": "k keep  m merge  x forget  1-5 screens  q quit",
    "brief": "1-5 screens  q quit",
    "status": "1-5 screens  q quit",
}
READ_ONLY_KEYS = {
    "search": "Enter/Esc list  / search  f filters  1-5 screens  q quit   (read-only)",
    "timeline": "Enter open session  1-5 screens  q quit   (read-only)",
    "review": "1-5 screens  q quit   (read-only)",
}
FOCUS = {"search": "#results", "timeline": "#sessions", "review": "#findings",
         "brief": "#brief-scroll", "status": "#status-scroll"}
FILTER_HELP = ("filters: type:fact,preference tag:X project:auto session:S agent:NAME "
               "after:DATE before:DATE archived superseded mode:lexical|semantic|hybrid|words")


def one_line(text: str, width: int = TEXT_CELL) -> str:
    flat = " ".join(shown(text).split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"


class Line(Widget):
    """One line of text that changes often (the status line): redrawn in place, since
    its size never changes (a Static's update lays the whole screen out again)."""

    DEFAULT_CSS = "Line { height: 1; width: 1fr; }"

    def __init__(self, id: str) -> None:  # noqa: A002 - Textual's own name for it
        super().__init__(id=id)
        self.text = Text()

    def render(self) -> Text:
        return self.text

    def show(self, text: Text) -> None:
        self.text = text
        self.refresh()


class Confirm(ModalScreen[bool]):
    """Says exactly what an action does, and waits for y (or n / Escape)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "yes"), Binding("n", "answer(False)", "no"),
        Binding("escape", "answer(False)", "cancel")]

    def __init__(self, title: str, lines: list[str]) -> None:
        super().__init__()
        self.title_text = title
        self.lines = lines

    def compose(self) -> ComposeResult:
        body = Text(self.title_text + "\n\n", style="bold")
        for line in self.lines:
            body.append(line + "\n")
        body.append("\ny: yes   n or Esc: no")
        with Vertical(id="dialog"):
            yield VerticalScroll(Static(body, id="confirm-text"))

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class Ask(ModalScreen[str | None]):
    """One line of text to type (prefilled); Enter gives it, Escape gives None."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, prompt: str, value: str = "") -> None:
        super().__init__()
        self.prompt = prompt
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(Text(self.prompt + "   (Enter: go on, Esc: cancel)"))
            yield Input(value=self.value, id="ask")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class Viewer(App[None]):
    """The viewer: five screens (search, timeline, review, brief, status) as tabs."""

    TITLE = "mem browse"
    CSS = """
    Input { border: none; height: 1; padding: 0 1; }
    #query { background: $boost; }
    .keys { dock: bottom; height: 2; color: $text-muted; }
    #status-line { dock: bottom; height: 1; }
    #tabs { height: 1fr; }
    TabPane { padding: 0; height: 1fr; }
    Horizontal { height: 1fr; }
    DataTable { width: 60%; height: 1fr; }
    .pane { width: 40%; height: 1fr; border-left: solid $primary; padding: 0 1; }
    #dialog { width: 90%; height: auto; max-height: 90%; border: solid $accent;
              background: $surface; padding: 0 1; }
    Confirm, Ask { align: center middle; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+q", "quit", "quit", show=False, priority=True),
        Binding("escape", "to_list", "to the list", show=False),
        Binding("1", "screen('search')", "search", show=False),
        Binding("2", "screen('timeline')", "timeline", show=False),
        Binding("3", "screen('review')", "review", show=False),
        Binding("4", "screen('brief')", "brief", show=False),
        Binding("5", "screen('status')", "status", show=False),
        Binding("slash", "focus_query", "search", show=False),
        Binding("f", "focus_filters", "filters", show=False),
        Binding("d", "forget", "forget", show=False),
        Binding("space", "mark", "mark", show=False),
        Binding("S", "forget_session", "forget session", show=False),
        Binding("D", "forget_session", "forget session", show=False),
        Binding("c", "correct", "correct", show=False),
        Binding("t", "retag", "tags", show=False),
        Binding("T", "change_type", "type", show=False),
        Binding("a", "add", "add", show=False),
        Binding("z", "freeze", "freeze", show=False),
        Binding("k", "keep", "keep", show=False),
        Binding("m", "merge", "merge", show=False),
        Binding("x", "forget_finding", "forget finding", show=False),
    ]

    def __init__(self, vault: Vault, read_only: bool = False, query: str = "") -> None:
        super().__init__()
        self.vault = vault
        self.read_only = read_only
        self.initial_query = query
        self.hits: dict[str, SearchHit] = {}  # what the list shows, by id
        self.record: Record | None = None  # the one the detail pane shows, read whole
        self.marked: set[str] = set()
        self.findings: dict[str, ReviewItem] = {}
        self.session_days: dict[str, Any] = {}
        self.current: str | None = None  # the record under the cursor (actions act on it)
        self._detail_timer: Timer | None = None
        self.searches = 0  # searches run (a test or a bench waits on this)
        self.failure: Exception | None = None  # what ended it unexpectedly
        self.complete = True  # the list holds every result there is
        self.limit = PAGE  # results asked for: a page more each time the list's end is reached

    def _handle_exception(self, error: Exception) -> None:
        """A failure the viewer did not expect ends it, reported by mem's error boundary
        (one line; MEM_DEBUG=1 for the traceback) once the terminal is given back, never
        by Textual's own report, a traceback with local variables that would put
        decrypted memory on the screen."""
        self.failure = error
        self._return_code = 1
        if self._exception is None:  # the harness raises it again for a test
            self._exception = error
            self._exception_event.set()
        self.exit(return_code=1)

    # --- layout -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        keys = READ_ONLY_KEYS if self.read_only else KEYS
        with TabbedContent(initial="search", id="tabs"):
            with TabPane("1 Search", id="search"):
                yield Input(value=self.initial_query, placeholder="search as you type "
                            "(empty: the most recent)", id="query")
                yield Input(placeholder=FILTER_HELP, id="filters")
                with Horizontal():
                    yield DataTable(id="results", cursor_type="row", zebra_stripes=False)
                    yield VerticalScroll(Static(id="detail"), classes="pane")
                yield Static(Text(keys["search"]), classes="keys")
            with TabPane("2 Timeline", id="timeline"):
                with Horizontal():
                    yield DataTable(id="sessions", cursor_type="row")
                    yield VerticalScroll(Static(id="conversation"), classes="pane")
                yield Static(Text(keys["timeline"]), classes="keys")
            with TabPane("3 Review", id="review"):
                with Horizontal():
                    yield DataTable(id="findings", cursor_type="row")
                    yield VerticalScroll(Static(id="finding"), classes="pane")
                yield Static(Text(keys["review"]), classes="keys")
            with TabPane("4 Brief", id="brief"):
                yield VerticalScroll(Static(id="brief-text"), id="brief-scroll")
                yield Static(Text(KEYS["brief"]), classes="keys")
            with TabPane("5 Status", id="status"):
                yield VerticalScroll(Static(id="status-text"), id="status-scroll")
                yield Static(Text(KEYS["status"]), classes="keys")
        yield Line(id="status-line")

    def on_mount(self) -> None:
        results = self.part("#results", DataTable)
        results.add_columns(" ", "type", "created", "text")
        self.part("#sessions", DataTable).add_columns("day", "project", "agent", "msgs",
                                                           "session")
        self.part("#findings", DataTable).add_columns("key", "kind", "what")
        self.run_search()
        self.part("#query", Input).focus()

    def part(self, selector: str, kind: type[W]) -> W:
        """A widget of the viewer's own screen, whichever is on top (a dialog, whose
        answer comes back here, or none)."""
        return self.screen_stack[0].query_one(selector, kind)

    # --- messages -----------------------------------------------------------------------

    def say(self, text: str, error: bool = False) -> None:
        self.part("#status-line", Line).show(
            Text(text, style="bold red" if error else ""))

    def attempt(self, what: Callable[[], object]) -> bool:
        """Run an operation; a known error is one line on the status line, and the
        vault is as the operation leaves it on error (unchanged)."""
        from memvault.cli.errors import word

        try:
            what()
        except MemError as exc:
            self.say(word(exc), error=True)
            return False
        return True

    # --- search -------------------------------------------------------------------------

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id in ("query", "filters"):
            self.limit = PAGE
            self.run_search()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id in ("query", "filters"):
            self.part("#results", DataTable).focus()

    def action_to_list(self) -> None:
        """Escape in a search box: to the list, where the keys act."""
        self.part("#results", DataTable).focus()

    def _search_filters(self) -> tuple[Filters, str | None, datetime]:
        """The filters box, read as `mem search` reads its flags (cli/context.py)."""
        from memvault.cli import context

        text = self.part("#filters", Input).value
        try:
            words = shlex.split(text)
        except ValueError:
            raise UsageError("a quote is not closed in the filters") from None
        given: dict[str, list[str]] = defaultdict(list)
        flags: set[str] = set()
        for word in words:
            name, sep, value = word.partition(":")
            if not sep:
                if name not in ("archived", "superseded"):
                    raise UsageError(f"unknown filter {name!r}; {FILTER_HELP}")
                flags.add(name)
                continue
            if name not in ("type", "category", "tag", "project", "session", "agent",
                            "after", "before", "mode"):
                raise UsageError(f"unknown filter {name!r}; {FILTER_HELP}")
            given[name] += [v for v in value.split(",") if v]
        def last(name: str) -> str | None:
            return given[name][-1] if given[name] else None

        now = datetime.now().astimezone()
        filters = context.filters(
            given["type"] or None, given["category"] or None, given["tag"] or None,
            last("session"), last("after"), last("before"), "archived" in flags,
            "superseded" in flags, self.limit, now, last("agent"))
        for kind in filters.types:
            from memvault.model.records import check_type

            check_type(kind)
        for value in given["project"]:
            from memvault.ops.projects import resolve_project

            tag = resolve_project(self.vault, value)
            if tag is None:
                raise UsageError(f"no project at {value!r}")
            filters.tags.append(tag)
        return filters, last("mode"), now

    def run_search(self, more: bool = False) -> None:
        """The query and filters as `mem search` runs them; the list shows the results
        (`more`: a longer list of the same search, whose new rows are added below)."""
        from memvault.ops import recall

        query = self.part("#query", Input).value
        outcome: list[Any] = []

        def search() -> None:
            filters, mode, now = self._search_filters()
            recall.check_mode(mode)
            outcome.append(recall.search(self.vault, query, filters, now=now, audit=False,
                                         mode=mode))

        self.searches += 1
        if not self.attempt(search):
            return
        result = outcome[0]
        self.vault.audit_read("browse.search", [h.memory_id for h in result.results],
                              results=len(result.results))
        table = self.part("#results", DataTable)
        if not more:
            table.clear()
            self.hits = {}
        for hit in result.results:
            if hit.memory_id in self.hits:
                continue
            self.hits[hit.memory_id] = hit
            table.add_row(Text("*" if hit.memory_id in self.marked else " "),
                          Text(hit.type), Text(hit.created_at[:10]),
                          Text(one_line(hit.content)), key=hit.memory_id)
        self.complete = len(result.results) < self.limit  # nothing more to page in
        if more:
            self.say(f"{len(self.hits)} shown, ranked {result.mode}")
            return
        note = f"  ({result.notice})" if result.notice else ""
        nothing = "no words to search for" if result.no_words else "no matches"
        self.say((f"{len(self.hits)} shown, ranked {result.mode}" if self.hits
                  else nothing) + note)
        if self.hits:
            self.highlight(next(iter(self.hits)), typing=True)
        else:
            self.part("#detail", Static).update("")
            self.current, self.record = None, None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value if event.row_key is not None else None
        if key is None:
            return
        if event.data_table.id == "results":
            self.highlight(key)
            if event.cursor_row >= event.data_table.row_count - 1 and not self.complete \
                    and self.limit < MAX_RESULTS:
                self.limit += PAGE
                self.run_search(more=True)
        elif event.data_table.id == "findings":
            self.show_finding(key)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "sessions" and event.row_key.value is not None:
            self.open_session(event.row_key.value)

    def highlight(self, memory_id: str, typing: bool = False) -> None:
        """The record under the cursor: what the actions act on, at once; its pane is
        read and drawn once the typing or the cursor rests, not for every keystroke or
        row passed over."""
        if memory_id == self.current and self._detail_timer is not None:
            return  # the list's own notice of the row a search put the cursor on
        self.current = memory_id
        if self._detail_timer is not None:
            self._detail_timer.stop()
        self._detail_timer = self.set_timer(TYPING_WAIT if typing else CURSOR_WAIT,
                                            self._detail_now)

    def _detail_now(self) -> None:
        self._detail_timer = None
        if not self.is_running or not self.screen_stack:
            return  # the viewer is closing
        if self.current is not None and (self.record is None or
                                         self.record.memory_id != self.current):
            self.show_detail(self.current)

    def current_record(self) -> Record | None:
        """The record under the cursor, read whole now if its pane is not drawn yet."""
        if self.current is not None and (self.record is None or
                                         self.record.memory_id != self.current):
            self.show_detail(self.current)
        return self.record if self.current is not None else None

    def show_detail(self, memory_id: str) -> None:
        from memvault.ops import review

        outcome: list[Any] = []
        if not self.attempt(lambda: outcome.append(review.inspect(self.vault, memory_id))):
            return
        seen = outcome[0]
        r = seen.record
        self.current, self.record = memory_id, r
        body = Text()
        body.append(r.memory_id + "\n", style="bold")
        body.append(f"{r.type} · {r.category} · importance {r.importance}"
                    + (" · archived" if r.archived else "") + "\n")
        body.append(f"created {r.created_at}" + (f" · updated {r.updated_at}"
                                                  if r.updated_at != r.created_at else "")
                    + "\n")
        rows = [("tags", ", ".join(shown(t) for t in r.tags)),
                ("agent", shown(" ".join(filter(None, (r.agent, r.channel))))),
                ("session", shown(r.session_id or "")),
                ("role", shown(r.role or "")), ("speaker", shown(r.name or "")),
                ("supersedes", r.supersedes or ""),
                ("replaced", " ← ".join(seen.replaced)),
                ("replaced by", " → ".join(seen.replaced_by)),
                ("originals", ", ".join(seen.originals)),
                ("summarised in", ", ".join(seen.summarised_in))]
        for name, value in rows:
            if value:
                body.append(f"{name}: ", style="bold")
                body.append(value + "\n")
        body.append("\n")
        body.append(shown(r.content))
        self.part("#detail", Static).update(body)

    # --- screens ------------------------------------------------------------------------

    def action_screen(self, name: str) -> None:
        self.part("#tabs", TabbedContent).active = name
        # Focus goes into the screen shown: left in the hidden one, it would bring that
        # one back (a pane that holds the focus is the active one).
        self.part(FOCUS[name], Widget).focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        pane = event.pane.id
        if pane == "timeline":
            self.load_timeline()
        elif pane == "review":
            self.load_review()
        elif pane == "brief":
            self.load_brief()
        elif pane == "status":
            self.load_status()

    def action_focus_query(self) -> None:
        self.action_screen("search")
        self.part("#query", Input).focus()

    def action_focus_filters(self) -> None:
        self.action_screen("search")
        self.part("#filters", Input).focus()

    def load_timeline(self) -> None:
        from memvault.ops import review

        outcome: list[Any] = []
        if not self.attempt(lambda: outcome.append(review.sessions(self.vault))):
            return
        from memvault.ops.projects import PREFIX, working_project

        here = working_project(self.vault)
        table = self.part("#sessions", DataTable)
        table.clear()
        self.session_days = {}
        for day in outcome[0]:
            self.session_days[day.session_id] = day
            # A project is a keyed tag (no path is stored): this folder's is named so.
            project = "this folder" if day.project and day.project == here else \
                (day.project or "-").removeprefix(PREFIX)[:8]
            table.add_row(Text(day.first[:10]), Text(project), Text(shown(day.agent or "-")),
                          Text(str(day.messages)), Text(shown(day.session_id)),
                          key=day.session_id)
        table.focus()
        self.say(f"{counted(len(self.session_days), 'session')}, newest first")

    def open_session(self, session: str) -> None:
        """A session read as a conversation, oldest turn first."""
        from memvault.model.records import Filters
        from memvault.ops import recall

        outcome: list[Any] = []
        filters = Filters(session=session, include_archive=True, include_superseded=True,
                          limit=10_000)
        if not self.attempt(lambda: outcome.append(recall.list_records(self.vault,
                                                                       filters))):
            return
        body = Text()
        for r in reversed(outcome[0].records):
            body.append(f"{r.created_at[:16].replace('T', ' ')} {shown(r.role or r.type)}",
                        style="bold")
            body.append((f" ({shown(r.name)})" if r.name else "") + "\n")
            body.append(shown(r.content) + "\n\n")
        self.part("#conversation", Static).update(body)

    def load_review(self) -> None:
        from memvault.ops import review

        outcome: list[Any] = []
        if not self.attempt(lambda: outcome.append(review.queue(self.vault))):
            return
        result = outcome[0]
        table = self.part("#findings", DataTable)
        table.clear()
        self.findings = {}
        for item in result.items:
            self.findings[item.key] = item
            table.add_row(Text(item.key[:8]), Text(item.kind.replace("_", " ")),
                          Text(one_line(item.records[0].content, 80)), key=item.key)
        table.focus()
        self.say(f"{counted(len(result.items), 'finding')} in "
                 f"{counted(result.memories_checked, 'memory', 'memories')}"
                 + (f" ({result.notice})" if result.notice else ""))
        if not result.items:
            self.part("#finding", Static).update(Text("nothing to review"))

    def show_finding(self, key: str) -> None:
        item = self.findings[key]
        body = Text()
        body.append(f"{item.kind.replace('_', ' ')}: {shown(item.reason)}\n", style="bold")
        body.append(f"key {item.key}\n\n")
        for r in item.records:
            mark = "KEEP " if r.memory_id == item.keep else ""
            body.append(f"{mark}{r.memory_id} · {r.type} · {r.created_at[:10]}\n",
                        style="bold" if mark else "")
            body.append(shown(r.content) + "\n\n")
        self.part("#finding", Static).update(body)

    def load_brief(self) -> None:
        """What an agent starting here would be told: the brief, its tokens, and each
        entry with why it is in (its section, importance, this folder's project)."""
        from memvault.integrations.hookbase import frame_tokens
        from memvault.ops import brief
        from memvault.ops.projects import resolve_project

        outcome: list[Any] = []
        values = self.vault.settings.values

        def build() -> None:
            project = resolve_project(self.vault, "auto")
            outcome.append((brief.build(
                self.vault, values["brief_max_entries"], values["brief_max_chars"],
                prefer_tag=project,
                max_tokens=self.vault.settings.brief_max_tokens - frame_tokens(),
                preview=True), project))

        if not self.attempt(build):
            return
        result, project = outcome[0]
        body = Text()
        cut = f"; cut by {result.limited_by}" if result.limited_by else ""
        body.append(f"{result.brief_count} of {counted(result.entry_count, 'entry')}, "
                    f"about {counted(result.tokens, 'token')}{cut}\n\n", style="bold")
        for e in result.entries:
            why = [e.section, f"importance {e.importance}"]
            if project and project in e.tags:
                why.append("this folder's project")
            if e.inferred:
                why.append("inferred from a session")
            body.append(f"{e.memory_id or 'setting'}  ", style="bold")
            body.append(f"[{', '.join(why)}]\n  {shown(e.content)}\n")
        body.append("\n" + shown(result.brief))
        self.part("#brief-text", Static).update(body)

    def load_status(self) -> None:
        """What `mem stats`, `mem doctor` and sync say, and what was stored per week."""
        from memvault.ops import admin, review

        outcome: list[Any] = []

        def gather() -> None:
            outcome.append((admin.stats(self.vault), review.sessions(self.vault),
                            review.memories(self.vault, self.vault.state())))

        if not self.attempt(gather):
            return
        stats, days, mems = outcome[0]
        body = Text()
        body.append(f"{self.vault.org}/{self.vault.user}" + ("  FROZEN" if stats.frozen
                                                             else "") + "\n", style="bold")
        for name, value in (("records", stats.records), ("active", stats.active),
                            ("archived", stats.archived), ("superseded", stats.superseded),
                            ("sessions", stats.sessions),
                            ("vectors waiting", stats.vectors_pending),
                            ("embeddings model", stats.embeddings_model or "-"),
                            ("key version", stats.key_version),
                            ("bytes on disk", stats.bytes_on_disk),
                            ("audit entries", stats.audit_entries)):
            body.append(f"{name:>18}: {value}\n")
        for finding in _doctor(self.vault):
            body.append(f"{finding.severity:>18}: {shown(finding.what)}\n")
        body.append("\nstored per week, by agent\n", style="bold")
        weeks: dict[tuple[str, str], int] = defaultdict(int)
        for day in days:
            weeks[(_week(day.first), day.agent or "-")] += day.messages
        for r in mems:
            # A summary ingest took from a transcript keeps its agent; the rest are typed.
            weeks[(_week(r.created_at), r.agent or "typed")] += 1
        top = max(weeks.values(), default=1)
        for (week, agent), n in sorted(weeks.items(), reverse=True)[:20]:
            bar = "█" * max(1, round(30 * n / top))
            body.append(f"{week} {shown(agent)[:14]:<14} {bar} {n}\n")
        self.part("#status-text", Static).update(body)

    # --- actions ------------------------------------------------------------------------

    def _writable(self) -> bool:
        if self.read_only:
            self.say("opened with --read-only: nothing can be changed", error=True)
        return not self.read_only

    def _on_search(self) -> bool:
        return self.part("#tabs", TabbedContent).active == "search" and \
            self.current is not None

    def _refresh(self) -> None:
        self.run_search()

    def action_mark(self) -> None:
        if not self._on_search() or self.current is None:
            return
        self.marked ^= {self.current}
        table = self.part("#results", DataTable)
        table.update_cell(self.current, table.ordered_columns[0].key,
                          Text("*" if self.current in self.marked else " "))

    def _forget(self, plan_of: Callable[[], Any], what: str) -> None:
        """Show exactly what goes (the records, and the summaries made again without
        them), ask once, then forget as `mem forget` does."""
        from memvault.ops import forget

        plans: list[Any] = []
        if not self.attempt(lambda: plans.append(plan_of())):
            return
        plan = plans[0]
        if not plan.targets:
            self.say("nothing matches: nothing to forget", error=True)
            return
        lines = [f"{r.memory_id}  {r.type}  {one_line(r.content, 60)}" for r in plan.targets]
        if plan.remade:
            lines.append(f"summaries made again without them: {', '.join(plan.remade)}")
        count = len(plan.targets)

        def done(yes: bool | None) -> None:
            if not yes:
                self.say("nothing was forgotten")
                return
            results: list[Any] = []
            if self.attempt(lambda: results.append(forget.forget(self.vault, plan))):
                self.marked -= {r.memory_id for r in plan.targets}
                self._refresh()
                self.say(f"forgot {counted(results[0].deleted_count, 'record')} "
                         f"(audit {results[0].audit_id})")

        self.push_screen(Confirm(f"Forget {what}: {counted(count, 'record')}, for good?",
                                 lines), done)

    def action_forget(self) -> None:
        if not self._on_search() or not self._writable():
            return
        from memvault.ops import forget

        ids = sorted(self.marked) if self.marked else [self.current or ""]
        self._forget(lambda: forget.select(self.vault, ids),
                     "the marked records" if self.marked else "this record")

    def action_forget_session(self) -> None:
        if not self._writable():
            return
        from memvault.ops import forget

        tabs = self.part("#tabs", TabbedContent)
        session: str | None = None
        if tabs.active == "timeline":
            table = self.part("#sessions", DataTable)
            if table.row_count:
                session = str(table.coordinate_to_cell_key(table.cursor_coordinate)
                              .row_key.value)
        elif (record := self.current_record()) is not None:
            session = record.session_id
        if not session:
            self.say("no session here", error=True)
            return
        self._forget(lambda: forget.select(self.vault, [], session=session),
                     f"session {shown(session)}")

    def _memory_to_change(self) -> Record | None:
        """The memory under the cursor, when the search screen is open for writing and it
        is one (a message is its transcript's; it is never changed in place)."""
        if not self._on_search() or not self._writable():
            return None
        record = self.current_record()
        if record is not None and record.type == "message":
            self.say("a message is a transcript's: add a memory instead (a)", error=True)
            return None
        return record

    def _supersede(self, record: Record, content: str, kind: str, title: str,
                   lines: list[str], how: str) -> None:
        """Ask, then store `content` as a new `kind` that supersedes `record` (with its
        tags and importance), as `mem add --supersedes` does."""
        from memvault.ops import remember

        def confirmed(yes: bool | None) -> None:
            if not yes:
                self.say("nothing was changed")
                return
            added: list[Any] = []
            if self.attempt(lambda: added.append(remember.add(
                    self.vault, content, kind, tags=list(record.tags),
                    importance=record.importance, supersedes=record.memory_id))):
                self._refresh()
                self.say(f"stored {added[0].record.memory_id}{how}, which supersedes "
                         f"{record.memory_id}")

        self.push_screen(Confirm(title, lines), confirmed)

    def action_correct(self) -> None:
        """A correction is a new record of the same type that supersedes this one."""
        record = self._memory_to_change()
        if record is None:
            return

        def typed(text: str | None) -> None:
            if text is None or not text.strip() or text == record.content:
                self.say("nothing was changed")
                return
            self._supersede(record, text, record.type, "Store this correction?", [
                f"new {record.type}: {one_line(text, 300)}",
                f"it supersedes {record.memory_id}: {one_line(record.content, 200)}"], "")

        self.push_screen(Ask(f"Correct this {record.type}:", " ".join(record.content.split())),
                         typed)

    def action_change_type(self) -> None:
        """A memory's type decides where it lives and how the brief ranks it: a new type
        is a new record (same text, tags and importance) that supersedes this one."""
        record = self._memory_to_change()
        if record is None:
            return
        from memvault.model.records import TYPES, check_type

        def typed(text: str | None) -> None:
            kind = (text or "").strip()
            if not kind or kind == record.type:
                self.say("nothing was changed")
                return
            if not self.attempt(lambda: check_type(kind)) or kind == "message":
                if kind == "message":
                    self.say("a memory cannot become a message", error=True)
                return

            self._supersede(record, record.content, kind, f"Store this as a {kind}?", [
                f"new {kind}: {one_line(record.content, 300)}",
                f"it supersedes the {record.type} {record.memory_id}"], f" as a {kind}")

        choices = ", ".join(t for t in TYPES if t != "message")
        self.push_screen(Ask(f"New type ({choices}):", record.type), typed)

    def action_retag(self) -> None:
        if not self._on_search() or not self._writable():
            return
        record = self.current_record()
        if record is None:
            return
        from memvault.ops import review

        def typed(text: str | None) -> None:
            if text is None:
                return
            tags = text.replace(",", " ").split()

            def confirmed(yes: bool | None) -> None:
                if yes and self.attempt(lambda: review.retag(self.vault, record.memory_id,
                                                             tags)):
                    self._refresh()
                    self.say(f"tags of {record.memory_id}: {' '.join(tags) or 'none'}")

            self.push_screen(Confirm("Set these tags?", [
                f"{record.memory_id}: {', '.join(shown(t) for t in tags) or 'no tags'}"]),
                confirmed)

        self.push_screen(Ask("Tags (space-separated):", " ".join(record.tags)), typed)

    def action_add(self) -> None:
        if self.part("#tabs", TabbedContent).active != "search" or \
                not self._writable():
            return
        from memvault.model.records import TYPES
        from memvault.ops import remember

        def typed(text: str | None) -> None:
            if text is None or not text.strip():
                return
            kind, sep, rest = text.partition(":")
            kind, body = (kind.strip(), rest.strip()) if sep and kind.strip() in TYPES \
                else ("fact", text.strip())

            def confirmed(yes: bool | None) -> None:
                added: list[Any] = []
                if yes and self.attempt(lambda: added.append(remember.add(
                        self.vault, body, kind))):
                    self._refresh()
                    self.say(("already stored: " if added[0].deduplicated else "stored ")
                             + added[0].record.memory_id)

            self.push_screen(Confirm(f"Store this {kind}?", [one_line(body, 400)]),
                             confirmed)

        self.push_screen(Ask("Add a memory (TYPE: text, e.g. preference: short answers; "
                             "fact by default):"), typed)

    def action_freeze(self) -> None:
        if not self._writable():
            return
        from memvault.ops import admin

        frozen = self.vault.state().frozen if self.vault.exists() else False

        def confirmed(yes: bool | None) -> None:
            if yes and self.attempt(lambda: admin.set_frozen(self.vault, not frozen)):
                self.say("unfrozen: writes work again" if frozen else
                         "frozen: reads work, writes are refused")

        self.push_screen(Confirm(
            "Unfreeze this memory?" if frozen else "Freeze this memory?",
            ["writes work again" if frozen else
             "every write (add, ingest, forget, compaction) is refused until unfrozen"]),
            confirmed)

    def _finding(self) -> ReviewItem | None:
        if self.part("#tabs", TabbedContent).active != "review":
            return None
        table = self.part("#findings", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return self.findings.get(str(key))

    def action_keep(self) -> None:
        item = self._finding()
        if item is None or not self._writable():
            return
        from memvault.ops import review

        if self.attempt(lambda: review.keep(self.vault, item)):
            self.load_review()
            self.say(f"kept {item.key}: not proposed again")

    def action_merge(self) -> None:
        item = self._finding()
        if item is None or not self._writable():
            return
        from memvault.ops import review

        def confirmed(yes: bool | None) -> None:
            if yes and self.attempt(lambda: review.merge(self.vault, item)):
                self.load_review()
                self.say(f"merged {item.key}: {item.keep} stays current")

        self.push_screen(Confirm("Merge?", [f"{item.keep} stays current"] + [
            f"{i} is superseded by it" for i in item.others]), confirmed)

    def action_forget_finding(self) -> None:
        item = self._finding()
        if item is None or not self._writable():
            return
        from memvault.ops import forget

        ids = list(item.others)

        def after_forget() -> Any:
            return forget.select(self.vault, ids)

        self._forget(after_forget, f"finding {item.key}")

    def on_screen_resume(self) -> None:  # back from a dialog on the review screen
        if self.part("#tabs", TabbedContent).active == "review":
            self.load_review()


def _week(stamp: str) -> str:
    try:
        year, week, _ = datetime.fromisoformat(stamp.replace("Z", "+00:00")).isocalendar()
    except ValueError:
        return "?"
    return f"{year}-W{week:02d}"


def _doctor(vault: Vault) -> list[Any]:
    """`mem doctor`'s findings that are not ok (its checks of the vault side)."""
    from memvault.ops import doctor

    try:
        result = doctor.diagnose(lambda: vault.settings)
    except MemError:
        return []
    return [f for f in result.findings if f.severity != "ok"]
