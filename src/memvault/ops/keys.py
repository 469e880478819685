"""Key epochs: `rotate-key`, re-encryption, and retiring data keys nothing uses.

Each step leaves a readable vault: the new wrapped key is written before the state
names it, files are replaced one at a time, and old keys are deleted last.
"""

from __future__ import annotations

from memvault.model.records import DOC_FILES
from memvault.model.results import RotateResult
from memvault.storage.userstore import UserStore
from memvault.vault.vault import Transaction, Vault


def rotate_key(vault: Vault, now: bool = False) -> RotateResult:
    with vault.transaction() as tx:
        return reencrypt(tx, rewrite=now)


def reencrypt(tx: Transaction, rewrite: bool = True) -> RotateResult:
    """Start a new key epoch and (with `rewrite`) re-encrypt every live record under it,
    then delete the data keys nothing uses any more."""
    epoch = tx.new_epoch()
    tx.audit("key.rotate", key_version=epoch)
    rewritten = 0
    if rewrite:
        store = tx.store
        for home in DOC_FILES:
            doc = store.read_doc(home)
            if doc is not None:
                for r in doc.get("records", []):
                    r["key_version"] = epoch
                tx.write_doc(home, doc)
                rewritten += 1
        for archived in (False, True):
            for relpath in store.layout.line_files(archived=archived):
                if store.key_versions(relpath) - {epoch}:
                    records = store.read_lines(relpath)
                    for r in records:
                        r.key_version = epoch
                    tx.rewrite(relpath, records)
                    rewritten += 1
    tx.rebuild_indexes()  # the index key derives from the current data key
    retired = retire_unused_keys(tx)
    return RotateResult(epoch, rewritten, tuple(retired))


def keys_in_use(store: UserStore, current: int) -> set[int]:
    """The key versions some file is sealed under (read from clear headers)."""
    used = {current}
    for relpath in store.layout.content_files():
        used |= store.key_versions(relpath)
    return used


def retire_unused_keys(tx: Transaction) -> list[int]:
    used = keys_in_use(tx.store, tx.epoch)
    retired = [e for e in tx.store.deks_on_disk() if e not in used]
    for epoch in retired:
        tx.store.remove_dek(epoch)
    if retired:
        tx.audit("key.retire", key_versions=retired)
    return retired
