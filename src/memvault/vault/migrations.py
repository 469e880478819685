"""Named, recorded migrations, and the per-user state upgrade.

A vault records in vault.json the names of the migrations applied to it (`migrations`).
Opening a vault applies the missing ones in order, under a vault-wide lock, and records
each name once it has run over every user; a user it could not upgrade (a damaged file)
is upgraded on the next write or read that needs it, by the same function.

- `user-state-2` (0.2.0): each user's state.json gains counters per type and the links
  of which record supersedes which, so that `stats`, `brief`, `show` and `list` never
  read every session (state format 1 → 2).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memvault.crypto.keys import MasterKey
from memvault.errors import DataError
from memvault.model.records import ARCHIVE
from memvault.storage import fsio
from memvault.storage.audit import AuditLog
from memvault.storage.layout import VAULT_FILE, UserLayout, users
from memvault.storage.state import STATE_FORMAT, Superseded, UserState
from memvault.storage.userstore import UserStore

MIGRATE_LOCK = ".migrate.lock"


@dataclass(frozen=True)
class Tally:
    live: dict[str, int]
    archived: dict[str, int]
    superseded: dict[str, Superseded]


def tally(store: UserStore) -> Tally:
    """Count a user's records per type and find the supersede links, one file at a time
    (memory holds only the links, never the records)."""
    live: dict[str, int] = {}
    archived: dict[str, int] = {}
    links: dict[str, str] = {}
    doc_ids: set[str] = set()
    for relpath, records, _ in store.files(include_archive=True):
        table = archived if relpath.startswith(ARCHIVE + "/") else live
        for r in records:
            table[r.type] = table.get(r.type, 0) + 1
            if r.supersedes:
                links[r.supersedes] = r.memory_id
            if not relpath.endswith(".jsonl"):
                doc_ids.add(r.memory_id)
    superseded: dict[str, Superseded] = {}
    if links:  # a link counts only when the record it supersedes exists
        for old in doc_ids & links.keys():
            superseded[old] = Superseded(links[old])
        for archived_file in (False, True):
            for relpath in store.layout.line_files(archived=archived_file):
                for memory_id in store.line_ids(relpath):
                    if memory_id in links:
                        superseded[memory_id] = Superseded(links[memory_id], archived_file)
    return Tally(live, archived, superseded)


def recount(store: UserStore, state: UserState) -> None:
    """Set the state's counters and supersede links from the files."""
    counts = tally(store)
    state.live, state.archived, state.superseded = counts.live, counts.archived, \
        counts.superseded


def upgrade_user(store: UserStore, state: UserState, audit: AuditLog) -> bool:
    """Bring a user's state to the current format, and audit it (caller holds the user's
    lock). True when it changed."""
    if state.counted:
        return False
    recount(store, state)
    state.format = STATE_FORMAT
    store.save_state(state)
    audit.append("migrate", migration="user-state-2")
    return True


def rebuild_state(store: UserStore, audit: AuditLog) -> list[str]:
    """Rebuild a lost state.json from what is on disk (caller holds the user's lock), and
    say what could not be recovered. [] when there is nothing to rebuild: the state is
    there, the user is new, or a destroy is under way (it must finish instead).

    From the files: the counters and supersede links (decrypting every record; if a file
    is unreadable they stay empty and are recounted by a later repair) and the key
    version (the highest data key on disk: every write seals under the newest). Lost for
    good: the frozen flag (left unfrozen), the keyed marks of forgotten messages and of
    scanned transcripts. The audit anchor is the log's head after a `repair` entry that
    says the state was rebuilt (appended first: the anchor names a durable entry)."""
    layout = store.layout
    if layout.state_path.exists() or layout.destroy_path.exists() or not layout.written():
        return []
    epochs = store.deks_on_disk()
    state = UserState(key_version=max(epochs) if epochs else 1)
    actions = [f"rebuilt the missing state.json from the files (key version "
               f"{state.key_version})"]
    counted = True
    try:
        recount(store, state)
    except DataError as exc:
        counted = False
        actions.append(f"could not count the records ({exc.message}); the counters are "
                       "recounted once the file is readable")
    actions.append("the frozen flag was lost with the state: the user is left unfrozen "
                   "(freeze again if it was frozen)")
    actions.append("the marks of forgotten messages were lost with the state and cannot be "
                   "recovered: re-ingesting a transcript may store forgotten messages again")
    audit.append("repair", state="rebuilt", key_version=state.key_version,
                 records=sum(state.live.values()) + sum(state.archived.values())
                 if counted else None)
    state.audit_head = audit.head
    store.save_state(state)
    return actions


def _user_state_2(root: Path, master: MasterKey, lock_timeout: float, actor: str) -> None:
    for org, user in list(users(root)):
        layout = UserLayout(root, org, user)
        store = UserStore(layout, master)
        audit = AuditLog(layout.audit_path, layout.audit_lock_path, store.meta_key,
                         lock_timeout, actor)
        with fsio.locked(layout.lock_path, lock_timeout, f"user {org}/{user}"):
            try:
                upgrade_user(store, store.load_state(), audit)
            except (DataError, FileNotFoundError):
                continue  # damaged or gone: upgraded lazily, or reported by verify


@dataclass(frozen=True)
class Migration:
    name: str
    run: Callable[[Path, MasterKey, float, str], None]  # root, master, lock timeout, actor


MIGRATIONS: tuple[Migration, ...] = (
    Migration("user-state-2", _user_state_2),
)


def pending(meta: dict[str, Any]) -> list[Migration]:
    done = set(meta.get("migrations") or [])
    return [m for m in MIGRATIONS if m.name not in done]


def apply(root: Path, master: MasterKey, lock_timeout: float, actor: str) -> list[str]:
    """Apply the migrations vault.json does not list yet; return their names."""
    applied: list[str] = []
    with fsio.locked(root / MIGRATE_LOCK, lock_timeout, "the vault (upgrading)"):
        path = root / VAULT_FILE
        meta = json.loads(path.read_text())
        for migration in pending(meta):
            migration.run(root, master, lock_timeout, actor)
            meta["migrations"] = [*meta.get("migrations", []), migration.name]
            fsio.atomic_write(path, (json.dumps(meta, indent=1) + "\n").encode())
            applied.append(migration.name)
    return applied
