"""Administration of a vault and a user: init, stats, reindex, freeze, audit, destroy."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from memvault.config import Settings
from memvault.crypto.keys import MasterKey
from memvault.errors import DataError, NotFound, Refused, UsageError
from memvault.model.records import DOC_FILES, TYPE_HOME, now_iso, uuid7
from memvault.model.results import (
    AuditProblem,
    AuditResult,
    DestroyResult,
    FreezeResult,
    InitResult,
    ReindexResult,
    Stats,
)
from memvault.ops import prefs
from memvault.storage.audit import AuditLog
from memvault.storage.layout import VAULT_FILE, orgs
from memvault.storage.state import UserState
from memvault.vault.keysource import create_key_file, key_source, load_master_key
from memvault.vault.vault import Vault, create_meta


def init(settings: Settings, passphrase: str | None = None) -> InitResult:
    """Create the vault and, when the key source is a key file that does not exist yet (the
    default one or a named one) or the OS keyring, the master key in it."""
    from memvault.ops.keys import backup_status, select_keyring

    root = settings.vault
    created = not (root / VAULT_FILE).exists()
    if created:
        master = _create(settings, passphrase)
    else:
        master = Vault(settings, passphrase=passphrase).master
    source = key_source(settings)
    return InitResult(
        str(root), settings.org, settings.user, master.source, created,
        key_file=str(source.path) if source.kind == "file" and source.path else None,
        backup=backup_status(settings),
        config_file=select_keyring(settings) if source.kind == "keyring" else None)


def _create(settings: Settings, passphrase: str | None) -> MasterKey:
    source = key_source(settings)
    if passphrase is not None and source.kind == "keyring":
        raise UsageError("a passphrase protects a key file; the OS keyring protects its "
                         "own entries", field="passphrase")
    if source.kind in ("none", "keyring") or (source.kind == "file" and source.path is not None
                                             and not os.path.lexists(source.path)):
        # No key yet, or a key file named (--key-file, MEM_KEY_FILE, the config file) that
        # does not exist yet, or the keyring: init makes it there.
        master = create_key_file(source, passphrase)
    else:
        # A configured source that fails (a locked password manager, a malformed
        # MEM_MASTER_KEY) is an error, never a reason to make a key somewhere else.
        if passphrase is not None:
            raise UsageError("a passphrase protects a new key file, but the key source "
                             "exists already; unset it to use a passphrase",
                             field="passphrase")
        master = load_master_key(settings)
    create_meta(settings.vault, master)
    return master


def stats(vault: Vault) -> Stats:
    """Counts and sizes, from the counters kept in the user's state (nothing decrypted
    but the preference settings).

    Before the vault's first write (no user has memory yet) that is zeros: the user is
    the one who will write, not a name mistyped. Once it has users, a user with no
    memory is NotFound, with the names there are (Vault.require_user): a mistyped
    --user or org must not read as an empty memory. Nothing is created either way."""
    exists = vault.exists()
    if not exists and not before_first_write(vault):
        vault.require_user()
    state = vault.state()
    by_type: dict[str, int] = {}
    for table in (state.live, state.archived):
        for kind, n in table.items():
            by_type[kind] = by_type.get(kind, 0) + n
    by_category: dict[str, int] = {}
    for kind, n in by_type.items():
        category = TYPE_HOME[kind][1] if kind in TYPE_HOME else "unknown"
        by_category[category] = by_category.get(category, 0) + n
    live = sum(state.live.values())
    archived = sum(state.archived.values())
    superseded_live = sum(1 for link in state.superseded.values() if not link.archived)
    size = sum(p.stat().st_size for p in vault.layout.dir.rglob("*") if p.is_file()) \
        if exists else 0
    return Stats(
        org=vault.org, user=vault.user, exists=exists, records=live + archived,
        active=max(0, live - superseded_live), archived=archived,
        superseded=len(state.superseded), by_type=dict(sorted(by_type.items())),
        by_category=dict(sorted(by_category.items())),
        sessions=_sessions(vault) if exists else 0,
        pref_keys=len(prefs.read(vault)),
        key_version=state.key_version if exists else None, frozen=state.frozen,
        bytes_on_disk=size, audit_entries=vault.audit.last_seq() if exists else 0,
        **_vectors(vault),
    )


def before_first_write(vault: Vault) -> bool:
    """Whether no user of the vault has memory yet (`mem init` and nothing since)."""
    return not orgs(vault.root)


def _vectors(vault: Vault) -> dict[str, Any]:
    """How many records wait for a vector, and the model of those stored (the store's
    count and its model: nothing decrypted)."""
    from memvault.ops.embed import configured_model, pending_count, stored_model

    model = stored_model(vault) or configured_model(vault.settings)
    return {"vectors_pending": pending_count(vault),
            "embeddings_model": model.key() if model else None}


def _sessions(vault: Vault) -> int:
    """Sessions live or compacted: a compacted session's file is in archive/ (and may
    keep its last messages in sessions/, under the same name)."""
    layout = vault.layout
    return len({f.rpartition("/")[2] for f in [*layout.line_files(),
                                                *layout.line_files(archived=True)]})


def reindex(vault: Vault) -> ReindexResult:
    vault.require_user()
    with vault.transaction(allow_frozen=True) as tx:  # derived data: no memory changes
        count = tx.rebuild_indexes()
        tx.audit("reindex", documents=count)
    return ReindexResult(count)


def set_frozen(vault: Vault, frozen: bool) -> FreezeResult:
    vault.require_user()  # a mistyped name must not create a user
    with vault.transaction(allow_frozen=True) as tx:
        if tx.state.frozen != frozen:
            tx.state.frozen = frozen
            tx.touch()
            tx.audit("freeze" if frozen else "unfreeze")
    return FreezeResult(frozen)


def audit_log(vault: Vault) -> AuditResult:
    if not vault.exists():
        return AuditResult((), True, ())
    check = vault.audit.check(vault.state().audit_head)
    return AuditResult(tuple(check.entries), check.ok,
                       tuple(AuditProblem(line, text) for line, text in check.problems))


def org_audit(vault: Vault) -> AuditLog:
    layout = vault.layout
    return AuditLog(layout.org_audit_path, layout.org_audit_lock_path,
                    vault.master.org_audit_key(vault.org), vault.settings.lock_timeout,
                    vault.actor)


def destroyed_at(vault: Vault) -> str:
    """When this user's memory was last destroyed on this machine, by `mem destroy` or
    by a destroy another machine made and a sync applied ("" if never): sync judges a
    destroy by this time against each record's (records.born), and sends it again to a
    remote that lacks it. Read from the org's audit log, which a destroy keeps and whose
    entries are authenticated."""
    latest = ""
    for entry in org_audit(vault).check().entries:
        detail = entry.get("detail") or {}
        if entry.get("op") in ("user.destroy", "sync.destroy") and \
                detail.get("user") == vault.user:
            latest = max(latest, str(detail.get("at") or entry.get("ts") or ""))
    return latest


def record_destroy(vault: Vault, at: str, records: int) -> str:
    """A destroy made elsewhere at `at`, applied here to what was stored before it (the
    records after it are kept): its org audit record, which destroyed_at() reads."""
    return org_audit(vault).append("sync.destroy", user=vault.user, records=records, at=at)


def destroy(vault: Vault, confirm: str | None, at: str | None = None) -> DestroyResult:
    """Delete all of a user's memory, index and keys; only an org-level audit record of
    the destruction remains.

    Nothing is decrypted and the user's state need not be readable: the counts come from
    the state's counters, else from the clear headers (and the documents, if they still
    open), so a damaged user is destroyed too. The plan is recorded beside the user's
    lock before anything is deleted; a run that was killed at any point is finished by
    the next one, which writes the org record once (found again by its destroy id)."""
    user = vault.user
    if confirm != user:
        raise Refused(f"destroying {vault.who} needs the user's name as confirmation: it "
                      f"deletes all of {user}'s memory and keys for good; nothing was "
                      "touched", field="confirm")
    store = vault.store
    with vault.lock():
        plan = store.destroy_pending()
        resumed = plan is not None
        if plan is None:
            if not store.dir.exists():
                raise NotFound(f"user {vault.who} has no memory to destroy")
            plan = _destroy_plan(vault)
            store.begin_destroy(plan)
        store.destroy()  # keys first, then the directory
        org = org_audit(vault)
        destroy_id = str(plan.get("destroy_id") or uuid7())
        records, files = int(plan.get("records") or 0), int(plan.get("files") or 0)
        # `at`: a destroy made elsewhere, applied here (sync), keeps its own time.
        audit_id = (_org_record(org, destroy_id) if resumed else None) or org.append(
            "user.destroy", user=user, records=records, files=files, destroy_id=destroy_id,
            at=at or str(plan.get("started_at") or now_iso()))
        store.end_destroy()
    return DestroyResult(vault.who, records, files, int(plan.get("index_docs") or 0),
                         audit_id)


def _destroy_plan(vault: Vault) -> dict[str, Any]:
    """What a destroy is about to delete, counted without decrypting a record."""
    store = vault.store
    try:
        state: UserState | None = store.load_state()
    except (DataError, FileNotFoundError):
        state = None
    if state is not None and state.frozen:
        raise Refused(f"the memory of {vault.who} is frozen: reads work, writes are "
                      "refused; nothing was touched", hint="unfreeze")
    if state is not None and state.counted:
        records = sum(state.live.values()) + sum(state.archived.values())
    else:  # no counters: the clear headers of session lines, and what documents open
        layout = store.layout
        records = 0
        for relpath in [*layout.line_files(), *layout.line_files(archived=True)]:
            with contextlib.suppress(OSError):
                records += sum(1 for _ in store.line_ids(relpath))
        for name in DOC_FILES:
            with contextlib.suppress(DataError, OSError):
                records += len(store.doc_records(name))
    epochs = store.deks_on_disk()
    epoch = state.key_version if state is not None else max(epochs, default=1)
    try:
        docs = int(vault.search_index(epoch).searcher().num_docs)
    except Exception:  # noqa: BLE001 - derived data: a count only, never a reason to stop
        docs = 0
    return {"destroy_id": uuid7(), "started_at": now_iso(), "records": records,
            "files": store.count_files(), "index_docs": docs}


def _org_record(org: AuditLog, destroy_id: str) -> str | None:
    """The audit id of the org record an earlier run of this destroy wrote, if any."""
    for entry in org.check().entries:
        if entry.get("op") == "user.destroy" and \
                (entry.get("detail") or {}).get("destroy_id") == destroy_id:
            return str(entry.get("audit_id"))
    return None
