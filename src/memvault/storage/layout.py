"""The vault's file layout (SPEC §2): every path mem reads or writes is named here.

    <vault>/vault.json
    <vault>/<org>/audit.jsonl             org records that outlive a user (destroy)
    <vault>/<org>/.locks/<user>.lock      outside the user's directory, so that a lock
                                          outlives what it protects (destroy removes it)
    <vault>/<org>/.locks/<user>.destroy   a destroy under way (its counts), until its org
                                          audit record is written: a re-run resumes it
    <vault>/<org>/<user>/{CLAUDE.md, preferences.json, sessions/, archive/, index/, vectors/,
                          keys/<epoch>.dek, audit.jsonl, state.json, reads.json}
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from memvault.model.location import LINE_SUFFIX
from memvault.model.records import ARCHIVE, DOC_FILES, SESSIONS
from memvault.storage.fsio import TMP_PREFIX

VAULT_FILE = "vault.json"
VAULT_FILE_MAX = 1 << 20  # a vault's description is a few hundred bytes
KEYS = "keys"
INDEX = "index"
VECTORS = "vectors"
MARKS = "marks"  # derived: the keyed marks of each line file's messages (userstore.Marks)
STATE = "state.json"
READS = "reads.json"
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
    def destroy_path(self) -> Path:
        return self.org_dir / LOCKS / f"{self.user}.destroy"

    @property
    def org_audit_path(self) -> Path:
        return self.org_dir / ORG_AUDIT

    @property
    def org_audit_lock_path(self) -> Path:
        return self.org_dir / LOCKS / ".org-audit.lock"

    @property
    def reads_path(self) -> Path:
        return self.dir / READS

    @property
    def reads_lock_path(self) -> Path:
        return self.org_dir / LOCKS / f"{self.user}.reads.lock"

    @property
    def state_path(self) -> Path:
        return self.dir / STATE

    @property
    def keys_dir(self) -> Path:
        return self.dir / KEYS

    @property
    def index_dir(self) -> Path:
        return self.dir / INDEX

    @property
    def vectors_dir(self) -> Path:
        return self.dir / VECTORS

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

    def temp_dirs(self) -> list[Path]:
        """Every folder a writer puts its temp files in (fsio: a temp beside the file)."""
        return [self.dir, self.dir / SESSIONS, self.dir / ARCHIVE, self.keys_dir,
                self.index_dir, self.vectors_dir, self.dir / MARKS / SESSIONS,
                self.dir / MARKS / ARCHIVE]

    def written(self) -> list[str]:
        """What shows that the user has written before: documents, session or archive
        files, a data key after the first, the audit log. None of these exists before the
        first write has saved the state (an interrupted first write leaves at most the
        folders and keys/1.dek), so with any of them and no state.json, the state was
        lost: a damaged user, never a new one."""
        found = [name for name in (*DOC_FILES, AUDIT) if self.path(name).exists()]
        for folder in (SESSIONS, ARCHIVE):
            path = self.dir / folder
            if path.is_dir() and any(not p.name.startswith(TMP_PREFIX)
                                     for p in path.iterdir()):
                found.append(folder + "/")
        if self.keys_dir.is_dir() and any(p.suffix == ".dek" and p.stem.isdigit()
                                          and int(p.stem) != 1
                                          for p in self.keys_dir.iterdir()):
            found.append(KEYS + "/")
        return found

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


def is_vault(folder: Path) -> bool:
    """Whether `folder` is a mem vault: its vault.json describes one (a scan for an
    agent's transcripts passes it by: every file in it is mem's own, sealed)."""
    import json

    from memvault.errors import MemError
    from memvault.storage.fsio import read_regular

    if not (folder / VAULT_FILE).is_file():
        return False
    try:  # a FIFO there must not block; another tool's vault.json is no description
        meta = json.loads(read_regular(folder / VAULT_FILE, limit=VAULT_FILE_MAX))
    except (MemError, OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(meta, dict) and "key_check" in meta and "format" in meta


def holds_memory(root: Path) -> bool:
    """Whether anything was ever stored in the vault (an org directory: a user's memory,
    or the audit record of a destroyed one). Such a vault must never be begun again under
    a new key; an unreadable one is taken to hold memory."""
    try:
        return any(p.is_dir() and not p.name.startswith(".") for p in root.iterdir())
    except FileNotFoundError:
        return False
    except OSError:
        return True


def orgs(root: Path) -> list[str]:
    """The orgs that hold at least one user (a directory left with only locks, or only
    the audit of destroyed users, holds none)."""
    if not root.is_dir():
        return []
    return [p.name for p in sorted(root.iterdir())
            if p.is_dir() and any(True for _ in users(root, p.name))]
