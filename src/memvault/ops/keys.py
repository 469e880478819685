"""Key epochs: `rotate-key`, re-encryption, and retiring data keys nothing uses; the
master key's backup and restore.

Each step leaves a readable vault: the new wrapped key is written before the state
names it, files are replaced one at a time, and old keys are deleted last.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memvault.config import Settings
from memvault.model.machine_results import KeyBackupResult, KeyBackupStatus, KeyRestoreResult
from memvault.model.progress import NO_PROGRESS, Progress
from memvault.storage.userstore import UserStore
from memvault.vault.vault import Transaction, Vault

if TYPE_CHECKING:
    from memvault.model.results import RotateResult


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
    from memvault.model.results import RotateResult

    return RotateResult(epoch, rewritten, tuple(retired))


def keys_in_use(store: UserStore, current: int) -> set[int]:
    """The key versions some file is sealed under (read from clear headers)."""
    return store.keys_in_use(current)


def retire_unused_keys(tx: Transaction) -> list[int]:
    return tx.retire_unused_keys()


# --- the master key's backup --------------------------------------------------------------
#
# A backup is the master key in the passphrase-wrapped key file format (crypto/keys.py,
# docs/vault-format.md), so it is also a key file mem opens as it is. vault.json records
# when it was made and of which key (its check value, already public there). The master
# key never changes (rotate-key changes data keys only), so one backup serves for good.

MIN_BACKUP_PASSPHRASE = 8  # a backup leaves the machine: a short passphrase is guessed


def backup_key(vault: Vault, output: Path, passphrase: str,
               force: bool = False) -> KeyBackupResult:
    """Write the vault's master key, wrapped under `passphrase`, to `output`: created 0600
    and whole before it appears, never over an existing file unless `force`; then record
    the backup in vault.json for backup_status."""
    from memvault.crypto.keys import PASSPHRASE_FORMAT, default_kdf_params, seal_with_passphrase
    from memvault.errors import Busy, StorageError, UsageError
    from memvault.model.records import now_iso
    from memvault.storage import fsio
    from memvault.vault.vault import record_key_backup

    if len(passphrase) < MIN_BACKUP_PASSPHRASE:
        raise UsageError(f"the backup's passphrase must have at least "
                         f"{MIN_BACKUP_PASSPHRASE} characters; nothing was written")
    check_backup_output(output, force)
    params = default_kdf_params()
    data = seal_with_passphrase(vault.master.key, passphrase, params).encode()
    if force:
        fsio.atomic_write(output, data)
    else:
        try:
            fsio.create_new(output, data)
        except StorageError:
            if os.path.lexists(output):  # made meanwhile by someone else: theirs stays
                raise fsio.exists_already(output) from None
            raise
    at = now_iso()
    try:
        record_key_backup(vault.root, vault.meta["key_check"], at,
                          vault.settings.lock_timeout)
        recorded = True
    except (StorageError, Busy):  # a vault that takes no writes (read-only, not ours)
        recorded = False
    return KeyBackupResult(str(output), at, str(params["kdf"]), PASSPHRASE_FORMAT, recorded)


def check_backup_output(output: Path, force: bool = False) -> None:
    """Refuse a backup's output before any passphrase is asked: a missing folder, a
    folder, an existing file without `force`."""
    from memvault.errors import NotFound, UsageError
    from memvault.storage import fsio

    if not output.parent.is_dir():
        raise NotFound(f"no directory {output.parent} for the backup")
    if output.is_dir():
        raise UsageError(f"{output} is a folder; name the backup file", field="output")
    if os.path.lexists(output) and not force:
        raise fsio.exists_already(output)


def backup_status(settings: Settings) -> KeyBackupStatus:
    """Whether the master key of the vault `settings` names was backed up, read from
    vault.json alone (no key needed; NotFound when there is no vault)."""
    from memvault.vault.vault import read_meta

    meta = read_meta(settings.vault)
    root = str(settings.vault)
    record = meta.get("key_backup")
    if not isinstance(record, dict) or not isinstance(record.get("at"), str):
        return KeyBackupStatus(root, "never")
    if record.get("key_check") != meta["key_check"]:
        return KeyBackupStatus(root, "other-key", record["at"])
    return KeyBackupStatus(root, "backed-up", record["at"])


BACKUP_LIMIT = 64 * 1024  # a backup is a few hundred bytes


def restore_key(settings: Settings, backup: Path,
                passphrase: str | None = None) -> KeyRestoreResult:
    """Put the master key in `backup` back where the vault's key is looked for (the key
    file --key-file, MEM_KEY_FILE or the config file names, else the default one; or the
    OS keyring when it is the selected source). Where there is no vault yet (a new
    machine), one is made for this key, as `mem init` makes one for a new key: `mem sync`
    then fills it. PassphraseNeeded when the backup is wrapped and no passphrase is
    given."""
    from dataclasses import replace

    from memvault.crypto.envelope import key_check_value
    from memvault.crypto.keys import MasterKey
    from memvault.errors import NotFound, Refused
    from memvault.model.records import now_iso
    from memvault.storage.layout import orgs
    from memvault.vault.keysource import key_source
    from memvault.vault.vault import create_meta, read_meta, record_key_backup

    root = settings.vault
    try:
        meta: dict[str, Any] | None = read_meta(root)  # the vault the key must open
    except NotFound:
        meta = None
    key = read_backup(backup, passphrase)
    # Checked before anything is written: a key that opens another vault goes nowhere.
    if meta is not None and key_check_value(key) != meta["key_check"]:
        empty = "" if orgs(root) else (
            " (it holds no memory: if `mem init` made it here, move it and its key away, "
            "then restore again)")
        raise Refused(f"backup {backup} holds the key of another vault, not of the vault "
                      f"at {root}{empty}; nothing was written")
    target = key_source(settings, writable=True)
    if target.kind == "keyring":
        result = _into_keyring(settings, key)
    else:
        assert target.path is not None  # a writable source is the keyring or a file
        result = _into_key_file(settings, target.path, key)
    if meta is None:
        # After the key: a kill between the two leaves the key, and a second restore
        # finds it there and makes the vault.
        create_meta(root, MasterKey(key, result.key_source))
        record_key_backup(root, key_check_value(key), now_iso(), settings.lock_timeout)
        result = replace(result, vault_created=True)
    return result


def read_backup(backup: Path, passphrase: str | None) -> bytes:
    """The master key in a backup (a passphrase-wrapped key file, or a copy of a plain
    one): PassphraseNeeded, Refused for a wrong passphrase, DataError for a malformed
    file, NotFound."""
    from memvault.crypto.keys import decode_key, is_passphrase_file, open_with_passphrase
    from memvault.errors import ConfigError, DataError, NotFound, PassphraseNeeded
    from memvault.storage import fsio

    where = f"backup {backup}"
    try:
        text = fsio.read_regular(backup, where, BACKUP_LIMIT).decode()
    except FileNotFoundError:
        raise NotFound(f"no file at {backup}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {where}: {exc}") from None
    if not is_passphrase_file(text):
        passphrase = None
    elif passphrase is None:
        raise PassphraseNeeded(f"{where} is passphrase-protected", hint="passphrase",
                               path=str(backup))
    try:
        if passphrase is None:
            return decode_key(text, where)
        return open_with_passphrase(where, text, passphrase)
    except ConfigError as exc:  # malformed: an input file, not the configuration
        raise DataError(exc.message) from None


def _into_keyring(settings: Settings, key: bytes) -> KeyRestoreResult:
    from memvault.crypto.envelope import key_check_value
    from memvault.vault.keysource import keyring_key, store_in_keyring

    held = keyring_key(key_check_value(key))
    master = store_in_keyring(key)  # Refused when the entry holds another key
    return KeyRestoreResult(str(settings.vault), master.source, None, held is None,
                            select_keyring(settings))


def _into_key_file(settings: Settings, path: Path, key: bytes) -> KeyRestoreResult:
    """A new key file, or none when `path` holds this key already; any other file there
    is never replaced (Refused)."""
    from memvault.errors import ConfigError, Refused
    from memvault.vault.keysource import read_key_file, write_key_file

    root = str(settings.vault)
    if os.path.lexists(path):
        try:
            held = read_key_file(path)
        except ConfigError as exc:
            raise Refused(f"a file is at {path} already ({exc.message}); it is never "
                          "replaced: move it away first; nothing was written") from None
        if held != key:
            what = "a passphrase-protected key" if held is None else "another key"
            raise Refused(f"{path} holds {what} already; it is never replaced: move it "
                          "away first (it may open another vault); nothing was written")
        return KeyRestoreResult(root, f"key file {path}", str(path), False)
    write_key_file(path, key)
    return KeyRestoreResult(root, f"key file {path}", str(path), True)


def select_keyring(settings: Settings) -> str | None:
    """When the keyring was chosen by a flag for this command (`--keyring`), write
    `key_source: keyring` into the config file, so that every later command (a hook, a
    cron job) finds the key there too. The config file's path when it was written."""
    from memvault.config import file_with_setting
    from memvault.storage import fsio

    if not settings.sources.get("key_source", "").startswith("flag"):
        return None
    change = file_with_setting("key_source", "keyring")
    if change is None:
        return None
    path, data = change
    fsio.ensure_dir(path.parent)
    fsio.atomic_write(path, data)
    return str(path)
