"""`mem key`: the master key's backup, wrapped under a passphrase, and its restore."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from memvault.cli import context
from memvault.cli.options import (
    JsonOpt,
    KeyFileOpt,
    KeyringOpt,
    OrgOpt,
    PassphraseFileOpt,
    UserOpt,
    VaultOpt,
)
from memvault.cli.output import Output
from memvault.errors import ConfigError, PassphraseNeeded, UsageError

if TYPE_CHECKING:
    from memvault.config import Settings
    from memvault.vault.vault import Vault

app = typer.Typer(help="Back up the master key under a passphrase, or restore it.",
                  no_args_is_help=True)


@app.command()
def backup(
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="The backup file to write (created 0600, whole or not at all).",
        show_default=False)],
    force: Annotated[bool, typer.Option(
        "--force", help="Replace a file that exists at --output.")] = False,
    passphrase_file: PassphraseFileOpt = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Write the master key wrapped under a passphrase (Argon2id and AES-256-GCM, the
    format of docs/vault-format.md): keep it off this machine, its passphrase apart."""
    from memvault.ops import keys

    unencrypted = False
    try:
        v = context.open_vault(vault, org, user, key_file, needs=None)
    except ConfigError as exc:
        if exc.hint != "keyring-unsafe-key":
            raise
        v, unencrypted = _moving_out(context.settings(vault, org, user, key_file)), True
    keys.check_backup_output(output, force)  # before the passphrase is typed, twice
    secret = context.passphrase(passphrase_file, "Passphrase for the backup: ", twice=True)
    result = keys.backup_key(v, output, secret, force)
    out = Output(json)

    def human(o: Output) -> None:
        o.info(f"backed up the master key of the vault at {v.root} to {result.output}")
        o.info("keep the file and its passphrase apart, and off this machine: together "
               "they open the whole vault; restore with `mem key restore FILE`")

    out.data(result, human)
    if unencrypted:
        out.warn(f"{v.master.source} still holds the key: restore the backup elsewhere "
                 "(`mem key restore FILE` once key_source: keyring is removed), then "
                 "delete that entry")
    if not result.recorded:
        out.warn(f"the vault at {v.root} takes no writes: this backup is not recorded in "
                 "its vault.json")


def _moving_out(settings: "Settings") -> "Vault":
    """The vault opened with a key read from a keyring backend that does not encrypt it:
    every other command refuses it there, a backup is how it gets out."""
    from memvault.vault.keysource import load_master_key
    from memvault.vault.vault import Vault, read_meta

    check = read_meta(settings.vault)["key_check"]
    return Vault(settings, master=load_master_key(settings, key_check=check, move_out=True))


@app.command()
def restore(
    file: Annotated[Path, typer.Argument(
        help="A backup made by `mem key backup` (or a copy of a key file).",
        show_default=False)],
    keyring: KeyringOpt = False,
    passphrase_file: PassphraseFileOpt = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Put a backed-up master key back where mem looks for it (the default key file,
    --key-file, or the OS keyring), once it is checked against the vault; an existing
    different key is never replaced. On a new machine (no vault yet), the vault is made
    for this key: `mem sync` then fills it."""
    from memvault.ops import keys

    if keyring and key_file is not None:
        raise UsageError("--keyring and --key-file name two places; choose one")
    settings = context.settings(vault, org, user, key_file, keyring)
    secret = context.passphrase(passphrase_file, "") if passphrase_file else None
    try:
        result = keys.restore_key(settings, file, secret)
    except PassphraseNeeded as exc:
        prompt = f"Passphrase for {exc.details.get('path', file)}: "
        result = keys.restore_key(settings, file, context.passphrase(None, prompt))

    def human(o: Output) -> None:
        if result.vault_created:
            o.info(f"no vault was at {result.vault}: made one for this key (in "
                   f"{result.key_source}); `mem sync --remote URL` fills it from a remote")
        elif result.written:
            o.info(f"restored the master key of the vault at {result.vault} into "
                   f"{result.key_source}")
        else:
            o.info(f"{result.key_source} holds the vault's master key already; nothing "
                   "was written")
        if result.config_file:
            o.info(f"key_source: keyring written to {result.config_file}")

    Output(json).data(result, human)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="key")
