"""The `mem` command line: commands parse and print; the operations layer decides.

main() is the one error boundary: a known error becomes one stderr line and its exit
code; Ctrl-C becomes one line that says what was kept, and exit 130; MEM_DEBUG=1 shows
the traceback instead.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from memvault.cli import (
    agents,
    commands,
    compact,
    config_cmd,
    context,
    key_cmd,
    lifecycle,
    machine,
    pref,
)
from memvault.errors import EX_FAILURE, EX_INTERRUPTED, MemError


class Interrupted(BaseException):
    """Ctrl-C, carried past Typer (which would end the command silently) to main()."""


class _Root(TyperGroup):
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise Interrupted from exc
        except typer.Abort as exc:
            # A prompt Ctrl-C stopped (Typer turns that into Abort); EOF stays an Abort.
            if isinstance(exc.__context__, KeyboardInterrupt):
                raise Interrupted from exc
            raise


app = typer.Typer(
    name="mem",
    cls=_Root,
    help="An encrypted, searchable memory vault for AI assistants, owned by its user.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"mem {version('memvault')}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True,
        help="Print the version and exit.")) -> None:
    """An encrypted, searchable memory vault for AI assistants, owned by its user."""


commands.register(app)
agents.register(app)
lifecycle.register(app)
compact.register(app)
machine.register(app)
app.add_typer(pref.app, name="pref")
app.add_typer(config_cmd.app, name="config")
app.add_typer(key_cmd.app, name="key")


def main() -> None:
    from memvault.cli.errors import word
    from memvault.cli.output import error_line

    debug = bool(os.environ.get("MEM_DEBUG"))
    # A command makes many objects that live until it ends and hold no cycles (records,
    # index documents): collecting every 700 allocations cost an ingest 8% for nothing.
    gc.set_threshold(50_000, 20, 100)
    os.umask(0o077)  # whatever mem or a library creates is private to the user
    context.CREATED.clear()
    try:
        _check_argv(sys.argv[1:])
        try:
            app(prog_name="mem")
        except SystemExit as done:
            if not done.code:
                context.announce_created()
            raise
    except MemError as exc:
        if debug:
            raise
        error_line(word(exc))
        sys.exit(exc.exit_code)
    except (Interrupted, KeyboardInterrupt):
        _interrupted(debug)
    except BrokenPipeError:
        # The reader went away (`mem list | head`): not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EX_FAILURE)
    except Exception as exc:  # the boundary: nothing unexpected escapes as a traceback
        if debug:
            raise
        error_line(f"unexpected {type(exc).__name__}; run again with MEM_DEBUG=1 "
                   "for the traceback")
        sys.exit(EX_FAILURE)


def _interrupted(debug: bool) -> None:
    """Ctrl-C: one line naming what was kept (every write is atomic or journalled, so an
    interrupted command leaves nothing half done, and running it again resumes), exit
    130. A hook exits 0 as always, and says nothing (an agent shows what it prints)."""
    import signal

    from memvault.cli.progress import interrupted_line, say

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C is no traceback
    if debug:
        raise
    if sys.argv[1:2] == ["hook"]:
        sys.exit(0)
    say(interrupted_line())
    sys.exit(EX_INTERRUPTED)


def _check_argv(args: list[str]) -> None:
    """An argument that is not UTF-8 (Python keeps its bytes as lone surrogates) would
    fail deep inside, when it is encrypted or printed: refuse it first, by position."""
    from memvault.errors import UsageError

    for n, arg in enumerate(args, start=1):
        try:
            arg.encode()
        except UnicodeEncodeError:
            raise UsageError(f"argument {n} is not UTF-8 text") from None
