"""From parsed options to resolved settings and an open vault (the CLI's only glue)."""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from memvault.config import Settings, resolve
from memvault.errors import DataError, NotFound, PassphraseNeeded, UsageError

if TYPE_CHECKING:
    from memvault.model.records import Filters
    from memvault.vault.vault import Vault


def settings(vault: Path | None, org: str | None, user: str | None,
             key_file: Path | None = None, keyring: bool = False, *,
             embeddings_optional: bool = False) -> Settings:
    """The resolved settings; `embeddings_optional` for a hook, which gives its brief
    and stores its session whatever the `embeddings:` section says."""
    return resolve(vault=vault, org=org, user=user, key_file=key_file,
                   key_source="keyring" if keyring else None,
                   embeddings_optional=embeddings_optional)


def open_vault(vault: Path | None, org: str | None, user: str | None,
               key_file: Path | None = None, keyring: bool = False, *,
               needs: Literal["user", "org"] | None = "user",
               embeddings_optional: bool = False) -> Vault:
    """Open the vault; a passphrase-protected key file is asked for on a terminal.

    A command that reads (or changes what is there) needs the user to have memory: on a
    mistyped user or org it is told so (NotFound, with the names there are), never
    answered as if the memory were empty. A walk over an org's users (`needs="org"`)
    needs the org to have some. A command that may make the user's first write (`needs`
    None) says on stderr when it created them."""
    from memvault.vault.vault import Vault

    resolved = settings(vault, org, user, key_file, keyring,
                        embeddings_optional=embeddings_optional)
    try:
        opened = Vault(resolved, on_create=_created)
    except PassphraseNeeded as exc:
        opened = Vault(resolved, passphrase=ask_passphrase(exc), on_create=_created)
    require(opened, needs)
    return opened


def require(vault: Vault, needs: Literal["user", "org"] | None) -> None:
    """NotFound unless the user has memory (or the org has users); see open_vault."""
    try:
        if needs == "user":
            vault.require_user()
        elif needs == "org":
            vault.require_org()
    except NotFound as exc:
        # Said with the error: a name from MEM_USER or the config file was not typed here.
        exc.details.setdefault("source", vault.settings.sources.get(exc.field or "", ""))
        raise


# Users the command's writes created, said when it ends well (announce_created): an
# error stays the one line it is, even after a first batch created the user.
CREATED: list[str] = []


def _created(vault: Vault) -> None:
    CREATED.append(f"created user {vault.user} in org {vault.org}")


def announce_created() -> None:
    from memvault.cli.output import Output

    for line in dict.fromkeys(CREATED):
        Output().info(line)
    CREATED.clear()


def ask_passphrase(exc: PassphraseNeeded) -> str:
    """Asked on the controlling terminal (getpass reads /dev/tty), so that stdin may be a
    pipe (`... | mem add -`); without a terminal (cron) the error stands."""
    if not has_terminal():
        raise exc
    import getpass

    return getpass.getpass(f"Passphrase for {exc.details.get('path', 'the key file')}: ")


def passphrase(source: Path | None, prompt: str, twice: bool = False) -> str:
    """A passphrase from `source` (--passphrase-file: its first line; - is stdin), else
    asked on the terminal (`twice` for a new one). Never from argv: any local user sees a
    process's arguments."""
    from memvault.crypto.keys import check_passphrase

    if source is not None:
        return _first_line(source)
    if not has_terminal():
        raise UsageError("a passphrase is needed and there is no terminal to ask for it",
                         field="passphrase_file")
    import getpass

    secret = getpass.getpass(prompt)
    if twice:
        check_passphrase(secret, "the passphrase typed")  # before it is typed again
        if secret != getpass.getpass("Repeat it: "):
            raise UsageError("the passphrases differ; nothing was written")
    return secret


def _first_line(source: Path) -> str:
    """The first line of a passphrase file: a regular file, a pipe (<(pass show mem)) or
    stdin (-). Anything else is refused before it is read (a device such as /dev/zero
    gives no line, only bytes; a folder, a socket), and so is a first line longer than
    a passphrase may be (no more than that is read), not UTF-8, or holding a control
    character (crypto.keys.check_passphrase): a passphrase is never what happens to be
    in a file's first 4 KiB."""
    import stat

    from memvault.crypto.keys import MAX_PASSPHRASE, check_passphrase

    what = f"passphrase file {source}"
    try:
        if str(source) == "-":
            stream = getattr(sys.stdin, "buffer", None)
            raw = stream.readline(MAX_PASSPHRASE + 2) if stream is not None else b""
        else:
            kind = os.stat(source).st_mode
            if not (stat.S_ISREG(kind) or stat.S_ISFIFO(kind)):
                shown = "a folder" if stat.S_ISDIR(kind) else "a device or a socket"
                raise UsageError(f"{what} is {shown}, not a file or a pipe",
                                 field="passphrase_file")
            with open(source, "rb") as fh:
                raw = fh.readline(MAX_PASSPHRASE + 2)
    except FileNotFoundError:
        raise UsageError(f"no passphrase file at {source}", field="passphrase_file") from None
    except OSError as exc:
        raise UsageError(f"cannot read {what}: {exc.strerror}",
                         field="passphrase_file") from None
    line = raw.removesuffix(b"\n").removesuffix(b"\r")
    if len(line) > MAX_PASSPHRASE:
        raise UsageError(f"{what} holds no passphrase: its first line is longer than "
                         f"{MAX_PASSPHRASE} bytes", field="passphrase_file")
    try:
        text = line.decode()
    except UnicodeDecodeError:
        raise UsageError(f"{what} is not UTF-8 text", field="passphrase_file") from None
    if not text.strip():
        raise UsageError(f"{what} is empty", field="passphrase_file")
    return check_passphrase(text, what, field="passphrase_file")


def filters(types: list[str] | None, categories: list[str] | None, tags: list[str] | None,
            session: str | None, after: str | None, before: str | None,
            include_archive: bool, include_superseded: bool, limit: int,
            now: datetime | None = None, agent: str | None = None) -> Filters:
    """The filters of `list` and `search`; a time phrase in `--after` or `--before` counts
    from `now` (default: the present)."""
    from memvault.model.records import Filters

    return Filters(
        types=types or [], categories=categories or [], tags=tags or [], session=session,
        agent=agent, after=date_flag(after, "after", now), before=date_flag(before, "before", now),
        include_archive=include_archive, include_superseded=include_superseded, limit=limit,
    )


def date_flag(value: str | None, field: str, now: datetime | None = None,
              end: bool = False) -> datetime | None:
    """A date flag's moment (index/when.py reads ISO-8601 and time phrases): the start of
    the time a phrase or a bare date names, or with `end` its last instant."""
    from memvault.index.when import instant

    if value is None:
        return None
    return instant(value, now or datetime.now().astimezone(), end=end, field=field)


def project(vault: Vault, value: str | None) -> str | None:
    """The project a command puts first (or tags with): `--project auto` in a working
    directory that is gone or unusable works without one, and says so."""
    from memvault.ops.projects import resolve_project

    tag = resolve_project(vault, value)
    if value == "auto" and tag is None:
        from memvault.cli.output import Output

        Output().warn("the current directory is gone or unusable: no project is used")
    return tag


def stdin_text(what: str) -> str:
    """Text given as `-`, read from stdin: what the user stores stays out of argv, where
    any local user can read it with `ps` while mem waits for the lock or the key.

    Bytes, decoded strictly: a text stream decodes what is not UTF-8 into lone
    surrogates, which fail later, when the text is encrypted. Never all of a pipe: a
    record's limit, a final "\r\n" and one byte (the caller checks the exact limit)."""
    from memvault.model.records import MAX_CONTENT

    stream = getattr(sys.stdin, "buffer", None)
    raw = stream.read(MAX_CONTENT + 3) if stream is not None else b""
    if len(raw) > MAX_CONTENT + 2:
        raise UsageError(f"{what} is larger than {MAX_CONTENT // 1024} KiB", hint="ingest")
    try:
        # Like `$(...)`: trailing newlines are the pipe's, not the memory's.
        return raw.decode().rstrip("\r\n")
    except UnicodeDecodeError:
        raise DataError("stdin is not UTF-8 text") from None


def has_terminal() -> bool:
    """Whether the process has a controlling terminal to ask on."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True
