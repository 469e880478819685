"""From parsed options to resolved settings and an open vault (the CLI's only glue)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mem.config import Settings, resolve

if TYPE_CHECKING:
    from mem.records import Filters
    from mem.vault import Vault


def settings(vault: Path | None, org: str | None, user: str | None,
             key_file: Path | None = None) -> Settings:
    return resolve(vault=vault, org=org, user=user, key_file=key_file)


def open_vault(vault: Path | None, org: str | None, user: str | None,
               key_file: Path | None = None) -> Vault:
    from mem.vault import Vault

    return Vault(settings(vault, org, user, key_file))


def filters(types: list[str] | None, categories: list[str] | None, tags: list[str] | None,
            session: str | None, after: str | None, before: str | None,
            include_archive: bool, include_superseded: bool, limit: int) -> Filters:
    from mem.records import Filters, parse_time

    return Filters(
        types=types or [], categories=categories or [], tags=tags or [], session=session,
        after=parse_time(after) if after else None,
        before=parse_time(before) if before else None,
        include_archive=include_archive, include_superseded=include_superseded, limit=limit,
    )
