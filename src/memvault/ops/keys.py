"""Key epochs: `rotate-key`, re-encryption, and retiring data keys nothing uses; the
master key's backup and restore.

Each step leaves a readable vault: the new wrapped key is written before the state
names it, files are replaced one at a time, and old keys are deleted last.
"""

from __future__ import annotations

import os
from pathlib import Path

from memvault.config import Settings
from memvault.model.results import (
    KeyBackupResult,
    KeyBackupStatus,
    KeyRestoreResult,
    RotateResult,
)
from memvault.storage.userstore import UserStore
from memvault.vault.vault import Transaction, Vault


def rotate_key(vault: Vault, now: bool = False) -> RotateResult:
    with vault.transaction() as tx:
        return reencrypt(tx, rewrite=now)


def reencrypt(tx: Transaction, rewrite: bool = True) -> RotateResult:
    """Start a new key epoch and (with `rewrite`) re-encrypt every live record under it,
    then delete the data keys nothing uses any more."""
    if rewrite:
        # Saved with the new epoch, before any file changes: a run killed from here on is
        # finished by the next write (Transaction.finish_retirement).
        tx.state.retire_through = max(tx.epoch, tx.state.retire_through or 0)
    epoch = tx.new_epoch()
    tx.audit("key.rotate", key_version=epoch)
    rewritten = tx.reseal() if rewrite else 0
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
    from memvault.errors import Busy, Refused, StorageError, UsageError
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
                raise Refused(f"{output} exists already; nothing was written",
                              field="force") from None
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
    from memvault.errors import NotFound, Refused, UsageError

    if not output.parent.is_dir():
        raise NotFound(f"no directory {output.parent} for the backup")
    if output.is_dir():
        raise UsageError(f"{output} is a folder; name the backup file", field="output")
    if os.path.lexists(output) and not force:
        raise Refused(f"{output} exists already; nothing was written", field="force")


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
    OS keyring when it is the selected source). Nothing is written unless the key opens
    this vault (Refused), and an existing different key is never replaced (Refused).
    PassphraseNeeded when the backup is wrapped and no passphrase is given."""
    from memvault.crypto import envelope
    from memvault.crypto.keys import decode_key, is_passphrase_file, open_with_passphrase
    from memvault.errors import (
        ConfigError,
        DataError,
        NotFound,
        PassphraseNeeded,
        Refused,
    )
    from memvault.storage import fsio
    from memvault.vault import keysource
    from memvault.vault.vault import read_meta

    root = settings.vault
    try:
        meta = read_meta(root)
    except NotFound as exc:  # a new vault would have a new key: never the backup's
        raise NotFound(exc.message, hint="vault-path") from None
    where = f"backup {backup}"
    try:
        text = fsio.read_regular(backup, where, BACKUP_LIMIT).decode()
    except FileNotFoundError:
        raise NotFound(f"no file at {backup}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {where}: {exc}") from None
    try:
        if is_passphrase_file(text):
            if passphrase is None:
                raise PassphraseNeeded(f"{where} is passphrase-protected", hint="passphrase",
                                       path=str(backup))
            key = open_with_passphrase(where, text, passphrase)
        else:  # a copy of a plain key file is a backup too
            key = decode_key(text, where)
    except PassphraseNeeded:
        raise
    except ConfigError as exc:  # malformed: an input file, not the configuration
        raise DataError(exc.message) from None
    if envelope.key_check_value(key) != meta["key_check"]:
        raise Refused(f"{where} holds the key of another vault, not of the vault at {root}; "
                      "nothing was written")
    target = keysource.restore_target(settings)
    config_file = None
    if target.kind == "keyring":
        held = keysource.keyring_key(meta["key_check"])
        master = keysource.store_in_keyring(key)
        config_file = select_keyring(settings)
        return KeyRestoreResult(str(root), master.source, None, held is None, config_file)
    path = target.path or keysource.default_key_path()
    if os.path.lexists(path):
        try:
            held_key = keysource.read_key_file(path)
        except ConfigError as exc:
            raise Refused(f"a key file is at {path} already and it is not this vault's key "
                          f"({exc.message}); it is never replaced: move it away first; "
                          "nothing was written") from None
        if held_key != key:
            what = "a passphrase-protected key" if held_key is None else "another key"
            raise Refused(f"{path} holds {what} already; it is never replaced: move it "
                          "away first (it may open another vault); nothing was written")
        return KeyRestoreResult(str(root), f"key file {path}", str(path), False)
    keysource.write_key_file(path, key)
    return KeyRestoreResult(str(root), f"key file {path}", str(path), True)


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
