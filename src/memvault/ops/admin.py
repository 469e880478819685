"""Administration of a vault and a user: init, stats, reindex, freeze, audit, destroy."""

from __future__ import annotations

from memvault.config import Settings
from memvault.errors import NotFound, Refused, UsageError
from memvault.index.base import IndexUnavailable
from memvault.model.records import TYPE_HOME
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
from memvault.storage.layout import VAULT_FILE
from memvault.vault.keysource import create_default_key, key_source_configured, load_master_key
from memvault.vault.vault import Vault, create_meta


def init(settings: Settings, passphrase: str | None = None) -> InitResult:
    """Create the vault and, when no key source is configured, the default master key."""
    root = settings.vault
    if (root / VAULT_FILE).exists():
        vault = Vault(settings, passphrase=passphrase)
        return InitResult(str(root), settings.org, settings.user, vault.master.source, False)
    if key_source_configured(settings):
        # A configured source that fails (a locked password manager, a malformed
        # MEM_MASTER_KEY) is an error, never a reason to make a key somewhere else.
        if passphrase is not None:
            raise UsageError("a passphrase protects a new default key file, but a key "
                             "source is already configured; unset it to use a passphrase",
                             field="passphrase")
        master = load_master_key(settings)
    else:
        master = create_default_key(passphrase)
    create_meta(root, master)
    return InitResult(str(root), settings.org, settings.user, master.source, True)


def stats(vault: Vault) -> Stats:
    """Counts and sizes, from the counters kept in the user's state (nothing decrypted
    but the preference settings)."""
    exists = vault.exists()
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
        sessions=len(vault.layout.line_files()) if exists else 0,
        preferences=len(prefs.read(vault)),
        key_version=state.key_version if exists else None, frozen=state.frozen,
        bytes_on_disk=size, audit_entries=vault.audit.last_seq() if exists else 0,
    )


def reindex(vault: Vault) -> ReindexResult:
    vault.require_user()
    with vault.transaction(allow_frozen=True) as tx:  # derived data: no memory changes
        count = tx.rebuild_indexes()
        tx.audit("reindex", documents=count)
    return ReindexResult(count)


def set_frozen(vault: Vault, frozen: bool) -> FreezeResult:
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


def destroy(vault: Vault, confirm: str | None) -> DestroyResult:
    """Delete all of a user's memory, index and keys; only an org-level audit record of
    the destruction remains. Counts come from the state and clear headers: a damaged
    user can be destroyed too."""
    user = vault.user
    if confirm != user:
        raise Refused(f"destroying {vault.who} needs the user's name as confirmation: it "
                      f"deletes all of {user}'s memory and keys for good; nothing was "
                      "touched", field="confirm")
    if not vault.exists():
        raise NotFound(f"user {vault.who} has no memory to destroy")
    with vault.transaction() as tx:
        records = sum(tx.state.live.values()) + sum(tx.state.archived.values())
        try:
            docs = int(vault.search_index(tx.epoch).searcher().num_docs)
        except (IndexUnavailable, ValueError, OSError):
            docs = 0
        files = tx.store.destroy()
    audit_id = org_audit(vault).append("user.destroy", user=user, records=records,
                                       files=files)
    return DestroyResult(vault.who, records, files, docs, audit_id)
