"""One exception tree. Each error carries its one-line message and its exit code.

Exit codes follow sysexits.h so that cron wrappers understand them (SPEC §6).
"""

from __future__ import annotations

EX_OK = 0
EX_FAILURE = 1
EX_USAGE = 2
EX_DATAERR = 65
EX_NOINPUT = 66
EX_TEMPFAIL = 75
EX_NOPERM = 77
EX_CONFIG = 78


class MemError(Exception):
    """A known failure: printed as one line on stderr, never as a traceback."""

    exit_code = EX_FAILURE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(MemError):
    """Invalid arguments: a bad name, an unknown type, an out-of-range value."""

    exit_code = EX_USAGE


class DataError(MemError):
    """A vault file fails authentication or is corrupt, or an input is malformed."""

    exit_code = EX_DATAERR


class NotFound(MemError):
    """A memory id, session, user, vault or input file does not exist."""

    exit_code = EX_NOINPUT


class Busy(MemError):
    """The user's lock was not obtained in time."""

    exit_code = EX_TEMPFAIL


class Refused(MemError):
    """Wrong key, a secret in the input, a frozen vault, an unconfirmed destroy."""

    exit_code = EX_NOPERM


class ConfigError(MemError):
    """No key, a key file with unsafe permissions, a bad config file."""

    exit_code = EX_CONFIG


class StorageError(MemError):
    """The filesystem refused a write (full disk, read-only). Nothing was changed."""

    exit_code = EX_FAILURE
