"""From parsed options to resolved settings and an open vault (the CLI's only glue)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from memvault.config import Settings, resolve
from memvault.errors import PassphraseNeeded

if TYPE_CHECKING:
    from memvault.model.records import Filters
    from memvault.vault.vault import Vault


def settings(vault: Path | None, org: str | None, user: str | None,
             key_file: Path | None = None) -> Settings:
    return resolve(vault=vault, org=org, user=user, key_file=key_file)


def open_vault(vault: Path | None, org: str | None, user: str | None,
               key_file: Path | None = None) -> Vault:
    """Open the vault; a passphrase-protected key file is asked for on a terminal."""
    from memvault.vault.vault import Vault

    resolved = settings(vault, org, user, key_file)
    try:
        return Vault(resolved)
    except PassphraseNeeded as exc:
        return Vault(resolved, passphrase=ask_passphrase(exc))


def ask_passphrase(exc: PassphraseNeeded) -> str:
    if not sys.stdin.isatty():
        raise exc
    import getpass

    return getpass.getpass(f"Passphrase for {exc.details.get('path', 'the key file')}: ")


def filters(types: list[str] | None, categories: list[str] | None, tags: list[str] | None,
            session: str | None, after: str | None, before: str | None,
            include_archive: bool, include_superseded: bool, limit: int) -> Filters:
    from memvault.model.records import Filters, parse_time

    return Filters(
        types=types or [], categories=categories or [], tags=tags or [], session=session,
        after=parse_time(after) if after else None,
        before=parse_time(before) if before else None,
        include_archive=include_archive, include_superseded=include_superseded, limit=limit,
    )
