"""The project a session works in, as a keyed id: `project:<16 hex>`.

A project is the git work tree that holds a directory (the nearest parent with a `.git`
entry), else the directory itself. Its id is a keyed hash of that path under the user's
keys, so a vault copied without its key does not say which folders its user works in,
and the same folder has a different id for each user. The id is a tag on what a session
stores (ingested messages, an agent's memories), so that the brief and `search --project`
can put the current project's memories first; `mem search --tag project:…` finds them.
"""

from __future__ import annotations

import os
from pathlib import Path

from memvault.errors import UsageError
from memvault.vault.vault import Vault

PREFIX = "project:"


def root_of(directory: Path) -> Path:
    """The git work tree holding `directory`, else `directory` (resolved, so that a link
    and its target are one project). A parent that cannot be looked into is passed."""
    start = Path(os.path.realpath(directory))
    for candidate in (start, *start.parents):
        try:
            os.lstat(candidate / ".git")
        except OSError:
            continue
        return candidate
    return start


def project_tag(vault: Vault, directory: Path | str) -> str:
    root = root_of(Path(directory))
    return PREFIX + vault.path_mark(b"project\0" + os.fsencode(root))[:16]


def working_project(vault: Vault, directory: Path | str | None = None) -> str | None:
    """The project of a working directory (this process's own when None), or None when
    there is no usable one: a directory deleted since, one too long to name (PATH_MAX),
    holding a NUL, or not a directory at all. Whoever asks then works without a project:
    a hook still gives its brief, a server still starts, a search still answers."""
    try:
        where = os.getcwd() if directory is None else directory
        if not os.path.isdir(where):
            return None
        return project_tag(vault, where)
    except (OSError, ValueError):
        return None


def resolve_project(vault: Vault, value: str | None) -> str | None:
    """`auto` (the current directory: None when it has none, see working_project), a
    directory, or None (no project preferred)."""
    if value is None or value == "none":
        return None
    if value == "auto":
        return working_project(vault)
    try:
        return project_tag(vault, Path(value))
    except ValueError:  # a NUL in it
        raise UsageError(f"{value!r} is not a directory path", field="project") from None
