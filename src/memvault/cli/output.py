"""The one output object: data to stdout (JSON or Rich for people), everything else to stderr.

Nothing printed here acts on the terminal: every string for people goes through
for_terminal (control characters shown as `\\x1b`, never sent raw) and is given to Rich
as a Text (never parsed as markup or emoji codes); JSON escapes control characters, C1
and DEL included (json_for_terminal: json.dumps leaves those raw with ensure_ascii=False).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from memvault.text.sanitize import for_terminal, json_for_terminal

if TYPE_CHECKING:
    from rich.console import Console

    from memvault.cli.progress import Tracker


NO_WRAP = frozenset({"id", "type", "created", "score", "seq", "time"})


class Output:
    def __init__(self, json_mode: bool = False) -> None:
        self.json_mode = json_mode
        self._out: Console | None = None
        self._err: Console | None = None

    @property
    def out(self) -> Console:
        if self._out is None:
            from rich.console import Console

            # To a pipe or a file nothing is wrapped: a line is as long as its text.
            self._out = Console(highlight=False, soft_wrap=not self.terminal)
        return self._out

    @property
    def terminal(self) -> bool:
        """Whether stdout is a terminal: there tables and cards are fitted to its width;
        to a pipe or a file, plain lines (one row a line, no box drawing, no wrapping)."""
        return sys.stdout.isatty()

    @property
    def err(self) -> Console:
        if self._err is None:
            from rich.console import Console

            # One message, one line: a wrapped warning would read as two.
            self._err = Console(stderr=True, highlight=False, soft_wrap=True)
        return self._err

    def data(self, doc: Any, human: Callable[[Output], None] | None = None) -> None:
        """Print a command's result (a typed result or a mapping): one JSON document, or
        the human rendering."""
        if hasattr(doc, "to_dict"):
            doc = doc.to_dict()
        if self.json_mode or human is None:
            sys.stdout.write(json_for_terminal(
                json.dumps(doc, ensure_ascii=False, indent=2, default=str)) + "\n")
        else:
            human(self)

    def line(self, text: str) -> None:
        """A plain data line on stdout (ids, values): no markup, no wrapping."""
        sys.stdout.write(for_terminal(text) + "\n")

    def text(self, text: str) -> None:
        """Stored text on stdout as it is (a brief): no markup, no wrapping, no newline
        added, and no control character acting on the terminal."""
        sys.stdout.write(for_terminal(text))

    def info(self, text: str) -> None:
        from rich.text import Text

        self.err.print(Text(for_terminal(text)))

    def warn(self, text: str) -> None:
        from rich.text import Text

        self.err.print(Text(f"warning: {for_terminal(text)}", style="yellow"))

    @contextmanager
    def progress(self, label: str, interrupted: Callable[[Tracker], str] | None = None,
                 show: bool = True, stdout_busy: bool = False) -> Iterator[Tracker]:
        """The `Progress` an operation reports to: a bar on stderr when stderr is a
        terminal (not with --json, nor when `show` is off: --quiet), and when stdout is
        not that terminal too if the command writes on it meanwhile (`stdout_busy`).
        `interrupted` words what was kept, should Ctrl-C stop the command (the error
        boundary prints it)."""
        from memvault.cli import progress

        live = (show and not self.json_mode and sys.stderr.isatty()
                and not (stdout_busy and sys.stdout.isatty()))
        tracker = progress.Tracker(label, self.err if live else None, interrupted)
        progress.activate(tracker)
        try:
            yield tracker
        finally:
            tracker.close()
        progress.deactivate(tracker)  # left in place on an error: the boundary reads it

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[Any]],
              title: str | None = None, header: bool = True) -> None:
        """Rows for people: a table on a terminal; to a pipe, one plain line a row with
        its columns aligned by spaces (a header line first when every column is named
        and `header`; no title)."""
        if not self.terminal:
            for text in plain_rows([*([columns] if header and all(columns) else []),
                                    *rows]):
                sys.stdout.write(text + "\n")
            return
        from rich.table import Table
        from rich.text import Text

        heading = Text(for_terminal(title), style="table.title") if title else None
        table = Table(title=heading, show_lines=False, header_style="bold")
        for column in columns:
            # Ids are copied into other commands: never wrap them (nor short fields).
            table.add_column(column, overflow="fold", no_wrap=column in NO_WRAP)
        for row in rows:
            # Cells are Text: a stored "[bold]" is shown, never taken for markup.
            table.add_row(*(Text("" if v is None else for_terminal(str(v))) for v in row))
        self.out.print(table)


# A cell wider than this is not padded to: it pushes the rest of its own line only.
PLAIN_PAD = 48


def plain_rows(rows: Sequence[Sequence[Any]]) -> list[str]:
    """Rows as lines, columns aligned by spaces (in terminal cells), the last one not
    padded; each cell on one line (its whitespace runs become one space)."""
    from rich.cells import cell_len

    cells = [[" ".join(for_terminal("" if v is None else str(v)).split()) for v in row]
             for row in rows]
    if not cells:
        return []
    widths = [max((n for n in (cell_len(row[col]) for row in cells) if n <= PLAIN_PAD),
                  default=0) for col in range(len(cells[0]) - 1)]
    return ["  ".join([*(c + " " * (w - cell_len(c)) for c, w in zip(row, widths,
                                                                    strict=False)),
                       row[-1]]).rstrip() for row in cells]


def whole_writes() -> None:
    """Under PYTHONUNBUFFERED (or `python -u`) stdout is a text layer straight on the file,
    which drops the rest of a write that a pipe took only in part, as it does when its
    reader goes away: the output would end cut short, with exit 0 and nothing said. A
    buffered layer (flushed at each line, as near to unbuffered as a text stream gets)
    writes all of it or raises, and the error boundary says what became of it."""
    import io

    out = sys.stdout
    if isinstance(out, io.TextIOWrapper) and isinstance(out.buffer, io.FileIO):
        raw = io.FileIO(out.fileno(), "w", closefd=False)  # fd 1 stays the interpreter's
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=out.encoding,
                                      errors=out.errors, line_buffering=True)


def error_line(message: str) -> None:
    """The error boundary's single stderr line (no Rich: it must work when all else failed)."""
    colour = sys.stderr.isatty() and not os.environ.get("NO_COLOR")
    prefix = "\033[31mmem: error:\033[0m " if colour else "mem: error: "
    try:
        sys.stderr.write(prefix + for_terminal(message.replace("\n", " ")) + "\n")
    except OSError:  # stderr's reader is gone too: the exit code still says what it was
        pass
