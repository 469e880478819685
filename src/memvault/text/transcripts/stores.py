"""What the readers of an agent's SQLite store share (OpenCode, Goose, Crush, Cursor's chat
store): recognising one cheaply, and reading it as the agent sees it without ever
locking or writing it.

The database is opened read-only and immutable, so that reading never takes a lock the
agent would wait on, nor writes a journal, while the agent runs. What the agent has not
yet moved from its write-ahead log into the database (an immutable reader does not see
the log) is read from a private copy of the two files; a copy taken mid-write that SQLite
cannot open falls back to the database as it is on disk.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, TypeVar

from memvault.errors import DataError, MemError, NotFound

SQLITE_MAGIC = b"SQLite format 3\x00"
T = TypeVar("T")


def is_sqlite(path: Path) -> bool:
    """Whether `path` is a file that starts as an SQLite database does (16 bytes read)."""
    try:
        with path.open("rb") as f:
            return f.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def tables(path: Path) -> set[str]:
    """The names of the database's tables; none when it is no database SQLite can open."""
    return set(schema(path))


def schema(path: Path) -> dict[str, set[str]]:
    """Each table's columns; none when it is no database SQLite can open. What a reader
    sniffs: cheap, and the same for every store."""
    import sqlite3

    try:
        with opened(path) as db:
            found = _schema(db)
    except sqlite3.Error:
        found = {}
    wal = path.with_name(path.name + "-wal")
    if not found and wal.is_file() and wal.stat().st_size:
        # A new database whose tables are still all in its write-ahead log (OpenCode's
        # after its first session): as the agent sees it.
        try:
            return read_store(path, "SQLite", _schema)
        except MemError:
            return {}
    return found


def holds(path: Path, wanted: AbstractSet[str], table: str, needed: AbstractSet[str]) -> bool:
    """Whether `path` is an SQLite store with the `wanted` tables and these columns in
    `table`: how an agent's reader recognises its database."""
    if not (path.is_file() and is_sqlite(path)):
        return False
    found = schema(path)
    return wanted <= set(found) and needed <= found.get(table, set())


def _schema(db: Any) -> dict[str, set[str]]:
    return {name: columns(db, name) for name in table_names(db)}


def table_names(db: Any) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def columns(db: Any, table: str) -> set[str]:
    return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}


def opened(path: Path, immutable: bool = True) -> Any:
    """A read-only connection (a context manager that closes it). Immutable: it never
    locks or writes the agent's files; not immutable only for a private copy."""
    import sqlite3
    from contextlib import closing
    from urllib.parse import quote

    flags = "mode=ro&immutable=1" if immutable else "mode=ro"
    uri = f"file:{quote(str(path.resolve()))}?{flags}"
    return closing(sqlite3.connect(uri, uri=True))


def read_store(path: Path, label: str, rows: Callable[[Any], T]) -> T:
    """`rows(connection)` on the agent's database as the agent sees it: with its
    write-ahead log when one is beside it (read from a private copy). DataError (one
    line) when it is no database SQLite can read, NotFound when it cannot be read."""
    import shutil
    import sqlite3
    import tempfile

    if not path.is_file():
        raise NotFound(f"no {label} database at {path}")
    wal = path.with_name(path.name + "-wal")
    try:
        if wal.is_file() and wal.stat().st_size:
            with tempfile.TemporaryDirectory(prefix="mem-store-") as tmp:
                copy = Path(tmp) / path.name
                shutil.copyfile(path, copy)
                shutil.copyfile(wal, Path(tmp) / wal.name)
                try:
                    with opened(copy, immutable=False) as db:
                        return rows(db)
                except sqlite3.DatabaseError:
                    pass  # copied mid-write: the database as it is on disk
        with opened(path) as db:
            return rows(db)
    except sqlite3.DatabaseError as exc:
        raise DataError(f"cannot read the {label} database {path}: {exc}") from None
    except OSError as exc:
        raise NotFound(f"cannot read {path}: {exc.strerror or exc}") from None
