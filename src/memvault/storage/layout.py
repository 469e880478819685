"""The vault's file layout (SPEC §2): every path mem reads or writes is named here.

    <vault>/vault.json
    <vault>/<org>/audit.jsonl             org records that outlive a user (destroy)
    <vault>/<org>/.locks/<user>.lock      outside the user's directory, so that a lock
                                          outlives what it protects (destroy removes it)
    <vault>/<org>/<user>/{CLAUDE.md, preferences.json, sessions/, archive/, index/,
                          keys/<epoch>.dek, audit.jsonl, state.json}
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from memvault.model.location import LINE_SUFFIX
from memvault.model.records import ARCHIVE, DOC_FILES, SESSIONS

VAULT_FILE = "vault.json"
KEYS = "keys"
INDEX = "index"
STATE = "state.json"
AUDIT = "audit.jsonl"
LOCKS = ".locks"
ORG_AUDIT = "audit.jsonl"


@dataclass(frozen=True)
class UserLayout:
    root: Path
    org: str
    user: str

    @property
    def org_dir(self) -> Path:
        return self.root / self.org

    @property
    def dir(self) -> Path:
        return self.root / self.org / self.user

    def path(self, relpath: str) -> Path:
        return self.dir / relpath

    def name(self, relpath: str) -> str:
        """How a file is named in messages: org/user/relpath (never the vault's path)."""
        return f"{self.org}/{self.user}/{relpath}"

    @property
    def lock_path(self) -> Path:
        return self.org_dir / LOCKS / f"{self.user}.lock"

    @property
    def audit_path(self) -> Path:
        return self.dir / AUDIT

    @property
    def audit_lock_path(self) -> Path:
        return self.org_dir / LOCKS / f"{self.user}.audit.lock"

    @property
    def org_audit_path(self) -> Path:
        return self.org_dir / ORG_AUDIT

    @property
    def org_audit_lock_path(self) -> Path:
        return self.org_dir / LOCKS / ".org-audit.lock"

    @property
    def state_path(self) -> Path:
        return self.dir / STATE

    @property
    def keys_dir(self) -> Path:
        return self.dir / KEYS

    @property
    def index_dir(self) -> Path:
        return self.dir / INDEX

    def dek_path(self, epoch: int) -> Path:
        return self.keys_dir / f"{epoch}.dek"

    def line_files(self, archived: bool = False) -> list[str]:
        """The relative paths of the user's session files (live or archived), sorted."""
        prefix = ARCHIVE if archived else SESSIONS
        folder = self.dir / prefix
        if not folder.is_dir():
            return []
        return sorted(f"{prefix}/{p.name}" for p in folder.iterdir()
                      if p.name.endswith(LINE_SUFFIX))

    def content_files(self, include_archive: bool = True) -> Iterator[str]:
        """Every file that holds records, documents first: the one walk over a user."""
        for name in DOC_FILES:
            if self.path(name).exists():
                yield name
        yield from self.line_files()
        if include_archive:
            yield from self.line_files(archived=True)


def users(root: Path, org: str | None = None) -> Iterator[tuple[str, str]]:
    """(org, user) for every user directory in the vault, or in one org."""
    if not root.is_dir():
        return
    orgs = [root / org] if org else sorted(p for p in root.iterdir() if p.is_dir())
    for org_dir in orgs:
        if not org_dir.is_dir():
            continue
        for user_dir in sorted(org_dir.iterdir()):
            if user_dir.is_dir() and (user_dir / STATE).exists():
                yield org_dir.name, user_dir.name
