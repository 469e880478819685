"""The `mem` command line: commands parse and print; the operations layer decides.

main() is the one error boundary: a known error becomes one stderr line and its exit
code; Ctrl-C becomes one line that says what was kept, and exit 130; MEM_DEBUG=1 shows
the traceback instead.

The app is built per run with only what the run needs: `mem add ...` imports and builds
the `add` command alone, while `mem --help`, a mistyped command and shell completion get
every command (`build()`, also `memvault.cli.app`). Start-up time is measured
(bench/bench_startup.py); what is left out is never seen by the run.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import typer

HELP = "An encrypted, searchable memory vault for AI assistants, owned by its user."
# The modules of memvault.cli that register commands (in this order), and the commands
# each registers (tests/test_startup.py holds the two together).
MODULES: dict[str, tuple[str, ...]] = {
    "commands": ("init", "add", "show", "list", "search", "reindex", "stats", "verify"),
    "agents": ("ingest", "brief", "hook", "hooks", "mcp"),
    "lifecycle": ("forget", "export", "import", "destroy", "freeze", "unfreeze", "audit",
                  "rotate-key"),
    "compact": ("compact",),
    "embed_cmd": ("embed",),
    "sync_cmd": ("sync",),
    "machine": ("setup", "doctor"),
    "pref": ("pref",),
    "config_cmd": ("config",),
    "key_cmd": ("key",),
    "browse": ("browse", "review"),
}


class Interrupted(BaseException):
    """Ctrl-C, carried past Typer (which would end the command silently) to main()."""


class ReaderGone(BaseException):
    """A closed stdout, carried past Click (which would exit 1, the code of a bug) to
    main()."""


def _root_group() -> type:
    """The root command's class: it hands Ctrl-C on to main() as Interrupted, and a
    closed stdout as ReaderGone."""
    from typer.core import TyperGroup

    class Root(TyperGroup):
        def invoke(self, ctx: Any) -> Any:
            import typer

            try:
                return super().invoke(ctx)
            except KeyboardInterrupt as exc:
                raise Interrupted from exc
            except BrokenPipeError as exc:
                raise ReaderGone from exc
            except typer.Abort as exc:
                # A prompt Ctrl-C stopped (Typer turns that into Abort); EOF stays Abort.
                if isinstance(exc.__context__, KeyboardInterrupt):
                    raise Interrupted from exc
                raise

    return Root


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        import typer

        typer.echo(f"mem {version('memvault')}")
        raise typer.Exit()


def build(only: str | None = None) -> typer.Typer:
    """The Typer app with every command, or with the command `only` alone."""
    import importlib

    import typer

    app = typer.Typer(
        name="mem",
        cls=_root_group(),
        help=HELP,
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        pretty_exceptions_show_locals=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def _root(version: bool = typer.Option(
            False, "--version", callback=_version, is_eager=True,
            help="Print the version and exit.")) -> None:
        """An encrypted, searchable memory vault for AI assistants, owned by its user."""

    for module, names in MODULES.items():
        if only is None or only in names:
            importlib.import_module(f"memvault.cli.{module}").register(app)
    _short_helps(app)
    if only is not None:
        app.registered_commands = [
            c for c in app.registered_commands
            if (c.name or typer.main.get_command_name(c.callback.__name__ if c.callback
                                                      else "")) == only]
        app.registered_groups = [g for g in app.registered_groups if g.name == only]
    return app


def _short_helps(app: typer.Typer) -> None:
    """A list of commands shows each one's first paragraph, but would keep that
    paragraph's line breaks: each command (and each group's) gets it as one line."""
    import inspect

    for info in app.registered_commands:
        if info.short_help is None and info.callback is not None and info.callback.__doc__:
            first = inspect.cleandoc(info.callback.__doc__).split("\n\n")[0]
            info.short_help = " ".join(first.split())
    for group in app.registered_groups:
        if group.typer_instance is not None:
            _short_helps(group.typer_instance)


def __getattr__(name: str) -> typer.Typer:
    """`memvault.cli.app`: every command (built on first use, for tests and generators)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    app = globals()["app"] = build()
    return app


def _invoked(args: list[str]) -> str | None:
    """The command a run names first. (A shell asking for completions passes its words
    in the environment, no argument: it gets every command.)"""
    for names in MODULES.values():
        if args and args[0] in names:
            return args[0]
    return None


def main() -> None:
    from memvault.cli import context, lean
    from memvault.cli.errors import word
    from memvault.cli.output import error_line, whole_writes
    from memvault.errors import EX_FAILURE, MemError

    debug = bool(os.environ.get("MEM_DEBUG"))
    # A command makes many objects that live until it ends and hold no cycles (records,
    # index documents): collecting every 700 allocations cost an ingest 8% for nothing.
    gc.set_threshold(50_000, 20, 100)
    os.umask(0o077)  # whatever mem or a library creates is private to the user
    lean.install()  # before anything formats help or a usage error
    context.CREATED.clear()
    whole_writes()
    stamp = os.environ.pop("MEM_HOOK_LOG_AS", None)  # hookbase.LOG_STAMP_ENV, unimported
    if stamp:  # a hook's background ingest: its stderr is the hook log, stamped line by line
        from memvault.integrations.hookbase import stamp_stderr

        stamp_stderr(stamp)
    try:
        _check_argv(sys.argv[1:])
        try:
            build(_invoked(sys.argv[1:]))(prog_name="mem")
        except SystemExit as done:
            if not done.code:
                context.announce_created()
            # The last of the output goes now, inside the boundary: a reader gone by then
            # is the BrokenPipeError below, not "Exception ignored" at the exit. (None:
            # started with stdout closed.)
            if sys.stdout is not None:
                sys.stdout.flush()
            raise
    except MemError as exc:
        if debug:
            raise
        error_line(word(exc))
        sys.exit(exc.exit_code)
    except (Interrupted, KeyboardInterrupt):
        _interrupted(debug)
    except (ReaderGone, BrokenPipeError):
        _reader_gone()
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
    from memvault.errors import EX_INTERRUPTED

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C is no traceback
    if debug:
        raise
    if sys.argv[1:2] == ["hook"]:
        sys.exit(0)
    say(interrupted_line())
    sys.exit(EX_INTERRUPTED)


def _reader_gone() -> NoReturn:
    """The reader of stdout went away (`mem list | head -1`): mem stops quietly, as git
    and coreutils do, killed by SIGPIPE (the shell's 141), neither an error line nor 1,
    the code of a bug. The exception has unwound every lock and write on its way here,
    so nothing is left half done; a hook exits 0 as always."""
    import atexit
    import signal

    # What is still buffered for stdout has nowhere to go: the flush at exit drops it.
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    if sys.argv[1:2] == ["hook"]:
        sys.exit(0)
    atexit._run_exitfuncs()  # a temporary index is removed as at any exit
    try:
        sys.stderr.flush()
    except OSError:
        pass
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGPIPE])
    os.kill(os.getpid(), signal.SIGPIPE)
    os._exit(128 + signal.SIGPIPE)  # never reached: the signal ends the process


def _check_argv(args: list[str]) -> None:
    """An argument that is not UTF-8 (Python keeps its bytes as lone surrogates) would
    fail deep inside, when it is encrypted or printed: refuse it first, by position."""
    from memvault.errors import UsageError

    for n, arg in enumerate(args, start=1):
        try:
            arg.encode()
        except UnicodeEncodeError:
            raise UsageError(f"argument {n} is not UTF-8 text") from None
