"""Shared options, declared once. Environment variables are read by memvault.config.resolve,
so that `mem config show` can say where each value came from.

Options and arguments that take one of a fixed set of values offer them to the shell's
completion; the command still checks the value itself, so that a wrong one is the usual
one line and exit 2, not a usage panel.
"""

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Optional

import typer


def starting(values: Iterable[str], incomplete: str) -> list[str]:
    """The values a shell may complete `incomplete` to."""
    return [v for v in values if v.startswith(incomplete)]


# Completions import what they offer only when a shell asks (start-up time).
def complete_type(incomplete: str) -> list[str]:
    from memvault.model.records import TYPES

    return starting(TYPES, incomplete)


def complete_agent(incomplete: str) -> list[str]:
    from memvault.model.records import AGENTS

    return starting(AGENTS, incomplete)


def complete_category(incomplete: str) -> list[str]:
    from memvault.model.records import CATEGORIES

    return starting(CATEGORIES, incomplete)


def complete_export_format(incomplete: str) -> list[str]:
    from memvault.ops.portability import FORMATS

    return starting(FORMATS, incomplete)


VaultOpt = Annotated[
    Optional[Path],  # noqa: UP045 - typer reads the annotation at runtime
    typer.Option("--vault", help=r"Vault root directory \[env: MEM_VAULT].", show_default=False),
]
OrgOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--org", help=r"Organisation name \[env: MEM_ORG; default: default].",
                 show_default=False),
]
UserOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--user", help=r"User name \[env: MEM_USER; default: login name].",
                 show_default=False),
]
KeyFileOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--key-file", help=r"Master key file \[env: MEM_KEY_FILE].", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]

# Filters shared by `list` and `search` (SPEC §5).
TypeOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option("--type", "-t", help="Only this type (repeatable).", show_default=False,
                 autocompletion=complete_type),
]
CategoryOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option("--category", "-c", help="Only this category (repeatable).",
                 show_default=False, autocompletion=complete_category),
]
TagOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option("--tag", help="Only records with this tag (repeatable: all must match).",
                 show_default=False),
]
SessionOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--session", help="Only this session.", show_default=False),
]
AgentOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--agent", help="Only sessions' messages from this agent (claude-code, "
                 "codex, gemini, ...: the transcript format's name).", show_default=False,
                 autocompletion=complete_agent),
]
AfterOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--after", help="Created at or after this date or time: ISO-8601 "
                 "(2026-05-01, 2026-05-01T14:30) or a phrase (\"yesterday\", \"last week\", "
                 "\"3 days ago\": from the start of the time it names).", show_default=False),
]
BeforeOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--before", help="Created before this date or time: ISO-8601 or a phrase "
                 "(\"yesterday\", \"last month\": before the start of the time it names).",
                 show_default=False),
]
ArchiveOpt = Annotated[
    bool, typer.Option("--include-archive", help="Include compacted-away originals.")
]
SupersededOpt = Annotated[
    bool, typer.Option("--include-superseded", help="Include superseded entries.")
]
ProjectOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--project", help="Put a project's memories first: auto (the git work tree "
                 "of the current directory) or a directory.", show_default=False),
]

# The master key's sources and passphrases (`init`, `key backup`, `key restore`).
KeyringOpt = Annotated[
    bool, typer.Option("--keyring", help=r"Keep the master key in the OS keyring (macOS "
                       r"Keychain, Secret Service, Windows Credential Locker), and write "
                       r"key_source: keyring into the config file \[env: MEM_KEY_SOURCE].")
]
PassphraseFileOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--passphrase-file", help="Read the passphrase from the first line of this "
                 "file (- for stdin; <(pass show mem) works), for scripts; without it, it "
                 "is asked on the terminal.", show_default=False),
]
