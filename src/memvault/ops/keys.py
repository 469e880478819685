"""Key epochs: `rotate-key`, re-encryption, and retiring data keys nothing uses.

Each step leaves a readable vault: the new wrapped key is written before the state
names it, files are replaced one at a time, and old keys are deleted last.
"""

from __future__ import annotations

from memvault.model.progress import NO_PROGRESS, Progress
from memvault.model.results import RotateResult
from memvault.storage.userstore import UserStore
from memvault.vault.vault import Transaction, Vault


def rotate_key(vault: Vault, now: bool = False,
               progress: Progress = NO_PROGRESS) -> RotateResult:
    """`progress` counts the files re-encrypted (with `now`); from the first one on, an
    interrupted rotation is finished by the next write."""
    with vault.transaction() as tx:
        return reencrypt(tx, rewrite=now, progress=progress)


def reencrypt(tx: Transaction, rewrite: bool = True,
              progress: Progress = NO_PROGRESS) -> RotateResult:
    """Start a new key epoch and (with `rewrite`) re-encrypt every live record under it,
    then delete the data keys nothing uses any more."""
    if rewrite:
        # Saved with the new epoch, before any file changes: a run killed from here on is
        # finished by the next write (Transaction.finish_retirement).
        tx.state.retire_through = max(tx.epoch, tx.state.retire_through or 0)
    epoch = tx.new_epoch()
    tx.audit("key.rotate", key_version=epoch)
    rewritten = tx.reseal(progress) if rewrite else 0
    progress.note("rebuilding the search index")
    tx.rebuild_indexes()  # the index key derives from the current data key
    retired = tx.retire_unused_keys()
    if rewrite:
        tx.state.retire_through = None
        tx.state.rekey_pending = False  # nothing forgotten can be decrypted any more
        tx.touch()
    else:
        tx.state.rekey_pending = True  # the next compaction re-encrypts
        tx.touch()
    return RotateResult(epoch, rewritten, tuple(retired))


def keys_in_use(store: UserStore, current: int) -> set[int]:
    """The key versions some file is sealed under (read from clear headers)."""
    return store.keys_in_use(current)


def retire_unused_keys(tx: Transaction) -> list[int]:
    return tx.retire_unused_keys()
