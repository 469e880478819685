"""One exception tree. Each error carries a plain message, its exit code and structured fields.

Exit codes follow sysexits.h so that cron wrappers understand them (SPEC §6). The core
never words a surface: messages name no command-line flag and no command. A surface
(cli/, an MCP server) adds its own words from two fields: `field`, the input that was
wrong (the CLI names it as its flag), and `hint`, a symbolic next step (the CLI says
which command to run).
"""

from __future__ import annotations

import errno
from typing import Any

EX_OK = 0
EX_FAILURE = 1
EX_USAGE = 2
EX_DATAERR = 65
EX_NOINPUT = 66
EX_IOERR = 74
EX_TEMPFAIL = 75
EX_NOPERM = 77
EX_CONFIG = 78
EX_INTERRUPTED = 130  # 128 + SIGINT: stopped by Ctrl-C, as a shell reports it


class MemError(Exception):
    """A known failure: shown as one line, never as a traceback."""

    exit_code = EX_FAILURE

    def __init__(self, message: str, *, field: str | None = None, hint: str | None = None,
                 **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.field = field  # the input at fault, e.g. "importance"
        self.hint = hint  # a symbolic next step, e.g. "init", "unfreeze"
        self.details = details


class UsageError(MemError):
    """Invalid input: a bad name, an unknown type, an out-of-range value."""

    exit_code = EX_USAGE


class DataError(MemError):
    """A vault file fails authentication or is corrupt, or an input is malformed."""

    exit_code = EX_DATAERR


class NotTranscript(DataError):
    """An input that is not a transcript mem stores (an agent's log or settings file, the
    transcript of an agent that only restates its session). A scan reports and passes it."""


class NotFound(MemError):
    """A memory id, session, user, vault or input file does not exist."""

    exit_code = EX_NOINPUT


class Busy(MemError):
    """The user's lock was not obtained in time."""

    exit_code = EX_TEMPFAIL


class Refused(MemError):
    """Wrong key, a secret in the input, a frozen vault, an unconfirmed destroy."""

    exit_code = EX_NOPERM


class Unreachable(MemError):
    """A service that did not answer or failed for now (the network, a time-out, a server
    error): nothing was changed by it, and a later run tries again."""

    exit_code = EX_TEMPFAIL


class ConfigError(MemError):
    """No key, a key file with unsafe permissions, a bad config file."""

    exit_code = EX_CONFIG


class PassphraseNeeded(ConfigError):
    """The key file is passphrase-protected and no passphrase was given. A surface that
    can ask (a terminal) asks and opens the vault again with it."""


class StorageError(MemError):
    """The filesystem refused a write (full disk, read-only, no permission). Nothing was
    changed. `details["errno"]` is the OS's error number, when there is one."""

    exit_code = EX_IOERR

    @property
    def refused(self) -> bool:
        """The filesystem will not take writes here at all (mounted read-only, or not
        ours to write), as opposed to a write that failed (a full disk): a reader can
        then work from a copy elsewhere."""
        return self.details.get("errno") in (errno.EROFS, errno.EACCES, errno.EPERM)


class WorkerFailed(MemError):
    """A worker process of a pool stopped the run: the error it raised, carried back as
    text (its message, exit code, field and hint: the same line as in-process), or its
    death before it answered (killed, crashed: a failure, exit 1)."""

    def __init__(self, message: str, exit_code: int = EX_FAILURE, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.exit_code = exit_code
