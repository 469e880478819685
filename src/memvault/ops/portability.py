"""The user's copy of their memory: export (JSON or Markdown) and import (SPEC §6).

Export streams: it reads one file at a time and writes each record as it goes, so its
memory stays flat however much is stored. Import validates the whole file before
anything is written, then admits its text like every other way in.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from memvault.config import validate_name
from memvault.crypto.envelope import content_hash
from memvault.crypto.keys import PASSPHRASE_FORMAT
from memvault.errors import DataError, NotFound, UsageError
from memvault.model.location import session_file
from memvault.model.progress import NO_PROGRESS, Progress
from memvault.model.records import (
    CATEGORIES,
    DOC_FILES,
    MAX_TAG,
    TYPE_HOME,
    TYPES,
    Record,
    check_category,
    clean_tags,
    normalise_time,
    now_iso,
)
from memvault.model.results import ExportResult, ImportResult
from memvault.ops import prefs as prefs_ops
from memvault.ops.admission import AdmissionPolicy, admit_name
from memvault.storage import fsio
from memvault.storage.state import Superseded, UserState
from memvault.text.sanitize import for_terminal, json_for_terminal
from memvault.text.words import counted
from memvault.vault.vault import Vault

EXPORT_VERSION = "1.0"
FORMATS = ("json", "markdown")


def _records(vault: Vault, state: UserState, category: str,
             docs: dict[str, list[Record]], progress: Progress = NO_PROGRESS
             ) -> Iterator[Record]:
    """A category's records: documents' sorted by time, sessions' file by file."""
    if category == "conversation":
        for relpath, records, _ in vault.store.files(include_archive=True):
            if relpath not in DOC_FILES:
                progress.advance()
            for r in records:
                if r.category == category:
                    yield vault.linked(r, state)
        return
    chosen = [r for name in DOC_FILES for r in docs[name] if r.category == category]
    chosen.sort(key=lambda r: (r.created_at, r.memory_id))
    for r in chosen:
        yield vault.linked(r, state)


def export(vault: Vault, out: IO[str], fmt: str = "json",
           categories: list[str] | None = None,
           progress: Progress = NO_PROGRESS) -> ExportResult:
    """Write every record (archived ones marked) and every preference to `out`, in the
    seed schema (the caller's stream: a file, or stdout when the user asks for it).
    `progress` counts the session files written out (documents are read at the start)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}: choose json or markdown",
                         field="format")
    wanted = [check_category(c) for c in categories or []] or list(CATEGORIES)
    state = vault.state()
    exists = vault.exists()
    docs = {name: vault.store.doc_records(name) if exists else [] for name in DOC_FILES}
    settings = prefs_ops.read(vault) if "preference" in wanted else {}
    prefs = {k: v["value"] for k, v in sorted(settings.items())}
    head = {"export_version": EXPORT_VERSION, "org_id": vault.org, "user_id": vault.user,
            "exported_at": now_iso()}
    writer = _Json(out, head) if fmt == "json" else _Markdown(out, head)
    lines = [*vault.store.layout.line_files(), *vault.store.layout.line_files(archived=True)]
    progress.start(len(lines) if "conversation" in wanted and exists else 0, "files")
    total = 0
    for category in wanted:
        writer.begin(category)
        count = 0
        for record in (_records(vault, state, category, docs, progress) if exists else ()):
            writer.record(record)
            count += 1
        writer.end(category, count)
        total += count
    writer.finish(prefs, total)
    vault.audit_read("export", every=True, count=total)
    return ExportResult(total, None)


def export_to_file(vault: Vault, path: Path, fmt: str = "json",
                   categories: list[str] | None = None,
                   progress: Progress = NO_PROGRESS, force: bool = False) -> ExportResult:
    """Export to a file, created 0600 (an export is plaintext) and in place only once
    complete (or to a pipe or device, such as /dev/stdout, as it is). A file already
    there (an earlier export, or anything else) is replaced only with `force`, as a key
    backup is: Refused before anything is read."""
    import io

    check_output(path, force)
    with fsio.output_writer(path, replace=force) as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8", newline="\n", write_through=True)
        count = export(vault, text, fmt, categories, progress).record_count
        text.flush()
        text.detach()
    return ExportResult(count, str(path))


def check_output(path: Path, force: bool = False) -> None:
    """Refuse an export's file before anything is read (a passphrase asked, a vault
    opened): a missing folder, a folder, a file already there without `force`."""
    if not path.parent.is_dir():
        raise NotFound(f"no directory {path.parent} for the export")
    fsio.check_output(path, replace=force)


class _Json:
    def __init__(self, out: IO[str], head: dict[str, Any]) -> None:
        self.out = out
        self.first = True
        out.write("{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n"
                                  for k, v in head.items()))
        out.write('  "categories": {')

    def begin(self, category: str) -> None:
        self.out.write(("\n" if self.first else ",\n") + f'    {json.dumps(category)}: '
                       '{\n      "records": [')
        self.first = False
        self.first_record = True

    def record(self, record: Record) -> None:
        self.out.write(("\n" if self.first_record else ",\n") + "        " +
                       json_for_terminal(json.dumps(record.to_dict(), ensure_ascii=False)))
        self.first_record = False

    def end(self, category: str, count: int) -> None:
        self.out.write(("\n      " if not self.first_record else "") +
                       f'],\n      "count": {count}\n    }}')

    def finish(self, prefs: dict[str, str], total: int) -> None:
        self.out.write("\n  },\n  \"preferences\": " +
                       json_for_terminal(json.dumps(prefs, ensure_ascii=False, indent=4))
                       .replace("\n", "\n  ") +
                       f',\n  "record_count": {total}\n}}\n')


class _Markdown:
    """A page for people, who may `cat` it: stored text goes through for_terminal, so a
    control character left in an old record is shown as `\\x1b`, never sent raw."""

    def __init__(self, out: IO[str], head: dict[str, Any]) -> None:
        self.out = out
        out.write(f"# Memory of {head['org_id']}/{head['user_id']}\n\n"
                  f"Exported {head['exported_at']}.\n\n")

    def begin(self, category: str) -> None:
        self.out.write(f"## {category.replace('_', ' ').capitalize()}\n\n")

    def record(self, r: Record) -> None:
        flags = [r.type, r.created_at[:10]] + (["archived"] if r.archived else [])
        flags += ["superseded"] if r.superseded_by else []
        where = f" (session {r.session_id})" if r.session_id else ""
        line = f"- **{', '.join(flags)}**{where}: " + " ".join(r.content.split())
        self.out.write(for_terminal(line) + "\n")

    def end(self, category: str, count: int) -> None:
        self.out.write(f"\n{counted(count, 'record')}.\n\n")

    def finish(self, prefs: dict[str, str], total: int) -> None:
        if prefs:
            self.out.write("## Preference settings\n\n" +
                           "".join(for_terminal(f"- `{k}`: {v}") + "\n"
                                   for k, v in prefs.items()) + "\n")
        self.out.write(f"{counted(total, 'record')} in all.\n")


# --- import -----------------------------------------------------------------------------

# What a file that is no export is, by its first bytes: import names it, and says what
# makes an export of it (the hint), rather than "not JSON".
MAGIC = ((b"\x1f\x8b", "gzip-compressed", "decompress it first (gunzip)"),
         (b"\x28\xb5\x2f\xfd", "zstd-compressed", "decompress it first (zstd -d)"),
         (b"\xfd7zXZ\x00", "xz-compressed", "decompress it first (unxz)"),
         (b"BZh", "bzip2-compressed", "decompress it first (bunzip2)"),
         (b"PK\x03\x04", "a zip archive", "extract the export from it first (unzip)"),
         (b"7z\xbc\xaf\x27\x1c", "a 7z archive", "extract the export from it first"),
         (b"\x89PNG", "an image (PNG)", ""), (b"%PDF", "a PDF document", ""),
         (b"\x7fELF", "a program (ELF)", ""))


def read_import(path: Path) -> str:
    """The text of an import file (a regular file, or a pipe such as <(...)), refused
    with what it looks like when it is clearly no JSON export: empty, compressed, an
    archive, binary, not UTF-8 (DataError; NotFound when there is no file)."""
    import stat

    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise UsageError(f"{path} is a folder; name the export file", field="file")
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):  # /dev/zero would never end
            raise DataError(f"{path} is a device or a socket, not a mem export")
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise NotFound(f"no file at {path}") from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None
    for magic, what, fix in MAGIC:
        if data.startswith(magic) and (magic != b"BZh" or data[3:4].isdigit()):
            raise DataError(f"{path} is {what}, not a mem JSON export" +
                            (f": {fix}" if fix else ""), hint=None if fix else "import-json")
    if b"\0" in data:
        raise DataError(f"{path} is binary data, not a mem JSON export", hint="import-json")
    try:
        text = data.decode("utf-8-sig")  # a BOM an editor added is no reason to refuse
    except UnicodeDecodeError:
        raise DataError(f"{path} is not UTF-8 text, so not a mem JSON export",
                        hint="import-json") from None
    problem = _not_json(text, str(path))  # said before a vault is opened for it
    if problem is not None:
        raise problem
    return text


def _not_json(raw: str, name: str = "the import file") -> DataError | None:
    """The refusal of a text that is clearly no JSON export, naming what it looks like
    (None: it may be one; parsing decides)."""
    text = raw.lstrip("\ufeff \t\r\n")
    if not text:
        what = "is empty"
    elif text.startswith("# Memory of "):
        what = "is mem's Markdown export, which is for reading"
    elif text[0] not in "{[":
        first = (text.split(None, 1) or [""])[0]  # only whitespace str.strip keeps: ""
        what = "looks like Markdown" if first.startswith(("#", "-", "*", ">", "|")) \
            else "is text"
        what += ", not JSON"
    elif _json_lines(text):
        what = ("holds JSON lines (a transcript, say: ingest takes those), not one JSON "
                "document")
    else:
        return None
    return DataError(f"{name} {what}", hint="import-json")


def _json_lines(text: str) -> bool:
    """Whether the text's first two lines are each a JSON document (JSONL)."""
    lines = [line for line in text.splitlines()[:50] if line.strip()][:2]
    try:
        return len(lines) == 2 and all(json.loads(line) is not None for line in lines)
    except ValueError:
        return False


def _parse_import(raw: str) -> tuple[list[tuple[Record, bool]], dict[str, str]]:
    """Validate a whole export before anything is written (DataError on any flaw)."""
    try:
        doc = json.loads(raw.removeprefix("\ufeff"))
    except ValueError:
        raise _not_json(raw) or DataError("the import file is not valid JSON",
                                          hint="import-json") from None
    except RecursionError:  # nested thousands deep
        raise DataError("the import file is nested too deeply to be a mem export") from None
    if isinstance(doc, dict) and doc.get("format") == PASSPHRASE_FORMAT:
        raise DataError("the import file is a backup of a master key (key restore takes "
                        "it), not an export of memory", hint="import-json")
    if isinstance(doc, dict) and "export_version" in doc and \
            doc["export_version"] != EXPORT_VERSION:
        raise DataError(f"the import file is a mem export of version "
                        f"{_shown(str(doc['export_version']))}; this mem reads version "
                        f"{EXPORT_VERSION}")
    if not isinstance(doc, dict) or doc.get("export_version") != EXPORT_VERSION:
        raise DataError(f"the import file is JSON but not a mem export (no export_version "
                        f"{EXPORT_VERSION})", hint="import-json")
    groups = doc.get("categories")
    prefs = doc.get("preferences", {})
    if not isinstance(groups, dict) or not isinstance(prefs, dict):
        raise DataError("the import file lacks categories or preferences")
    out: list[tuple[Record, bool]] = []
    seen: set[str] = set()
    for category, group in groups.items():
        if category not in CATEGORIES or not isinstance(group, dict) or \
                not isinstance(group.get("records"), list):
            raise DataError(f"the import file has a malformed category {category!r}")
        if group.get("count") != len(group["records"]):
            raise DataError(f"category {category!r} says {group.get('count')} records but "
                            f"holds {len(group['records'])}: the file was altered")
        for i, item in enumerate(group["records"]):
            where = f"{category} record {i + 1}"
            try:
                record = Record.from_stored(item)
            except DataError as exc:
                raise DataError(f"{where}: {exc.message}") from None
            if record.type not in TYPES or TYPE_HOME[record.type][1] != category \
                    or record.category != category:
                raise DataError(f"{where}: type {record.type!r} does not belong in {category}")
            if record.content_hash != content_hash(record.content):
                raise DataError(f"{where}: content does not match its content_hash "
                                "(the file was altered)")
            if not isinstance(record.memory_id, str) or record.memory_id in seen:
                raise DataError(f"{where}: missing or repeated memory_id")
            try:  # stored times are UTC with microseconds, so they sort as strings
                record.created_at = normalise_time(record.created_at)
                record.updated_at = normalise_time(record.updated_at or record.created_at)
            except (UsageError, TypeError, AttributeError):
                raise DataError(f"{where}: bad created_at or updated_at") from None
            if record.type == "message" and not record.session_id:
                raise DataError(f"{where}: a message without a session_id")
            if record.session_id is not None:
                try:
                    validate_name("session", record.session_id)
                except (UsageError, TypeError):
                    raise DataError(f"{where}: invalid session_id") from None
            _check_types(record, where)
            _check_ids(record, where)
            for tag in record.tags:  # the rule `add` applies (each tag once)
                try:
                    clean_tags([tag])
                except UsageError:
                    raise DataError(f"{where}: invalid tag {_shown(tag)}: 1-{MAX_TAG} "
                                    "characters, no whitespace") from None
            record.tags = clean_tags(record.tags)
            seen.add(record.memory_id)
            out.append((record, bool(item.get("archived"))))
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in prefs.items()):
        raise DataError("the import file has malformed preferences")
    total = doc.get("record_count")
    if total != len(out):
        raise DataError(f"record_count says {total} but the file holds {len(out)} records")
    looped = _supersede_cycle({r.memory_id: r.supersedes for r, _ in out if r.supersedes})
    if looped is not None:
        raise DataError(f"record {looped} supersedes itself through a chain of records that "
                        "supersede each other in a loop: every record of the loop would "
                        "vanish from list, search and brief")
    return out, prefs


# The form of an id mem writes: a UUID (v7), lowercase, with its hyphens.
ID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _check_ids(record: Record, where: str) -> None:
    """The record's id, and the ids it names (supersedes, compacted_from), have the form
    of the ids mem writes."""
    named = [record.memory_id, *([record.supersedes] if record.supersedes else []),
             *record.compacted_from]
    for memory_id in named:
        if not ID_RE.fullmatch(memory_id):
            raise DataError(f"{where}: {_shown(memory_id)} is not a memory id (a UUID as "
                            "mem writes it)")


def _shown(value: str) -> str:
    """A value from the file, as an error names it: quoted, and cut when long."""
    return repr(value if len(value) <= 40 else value[:40] + "...")


def _supersede_cycle(links: dict[str, str]) -> str | None:
    """A record on a loop of `supersedes` links (record → the one it replaces), if any.
    A link to a record that is not there ends a chain: it is no loop."""
    done: set[str] = set()
    for start in links:
        path: set[str] = set()
        node: str | None = start
        while node is not None and node not in done:
            if node in path:
                return node
            path.add(node)
            node = links.get(node)
        done |= path
    return None


def _check_types(record: Record, where: str) -> None:
    """Every field of an imported record has the type mem writes (or it is refused)."""
    optional_str = ("session_id", "message_id", "channel", "role", "supersedes")
    ok = (all(isinstance(getattr(record, f), str | None) for f in optional_str)
          and isinstance(record.tags, list) and all(isinstance(t, str) for t in record.tags)
          and isinstance(record.compacted_from, list)
          and all(isinstance(t, str) for t in record.compacted_from)
          and isinstance(record.importance, int | float)
          and not isinstance(record.importance, bool) and 0 <= record.importance <= 1
          and isinstance(record.key_version, int) and isinstance(record.updated_at, str))
    if not ok:
        raise DataError(f"{where}: a field has the wrong type or is out of range")


SCREEN_CHUNK = 256  # texts screened between two reports of progress


def import_text(vault: Vault, raw: str, progress: Progress = NO_PROGRESS) -> ImportResult:
    """Restore an export: every record keeps its id; what is already there is skipped.
    `progress`: the texts screened (nothing is written yet), then the files written in
    one transaction (kept once it is over)."""
    items, prefs = _parse_import(raw)
    policy = AdmissionPolicy(vault.settings)
    for record, _ in items:
        policy.admit_tags(record.tags, DataError)
    for key in prefs:
        admit_name(key, "preference key", DataError)
    texts = [record.content for record, _ in items] + [t for kv in prefs.items() for t in kv]
    progress.start(len(texts), "texts")
    admitted: list[str] = []
    for at in range(0, len(texts), SCREEN_CHUNK):  # any secret still refuses them all
        admitted += policy.admit_all(texts[at:at + SCREEN_CHUNK], "the import file")
        progress.advance(len(texts[at:at + SCREEN_CHUNK]))
    for (record, _), masked in zip(items, admitted, strict=False):
        # Personal data gets placeholders, as on every other way in.
        if masked != record.content:
            record.content, record.content_hash = masked, content_hash(masked)
    masked_prefs = admitted[len(items):]
    prefs = {k: masked_prefs[2 * i + 1] for i, k in enumerate(prefs)}
    imported = skipped = 0
    with vault.transaction() as tx:
        store = tx.store
        existing = {r.memory_id for name in DOC_FILES for r in store.doc_records(name)}
        for relpath in [*store.layout.line_files(), *store.layout.line_files(archived=True)]:
            existing.update(store.line_ids(relpath))  # clear ids: nothing decrypted
        docs: dict[str, dict[str, Any]] = {}
        lines: dict[str, list[Record]] = {}
        new: list[tuple[Record, bool]] = []
        for record, archived in items:
            if record.memory_id in existing:
                skipped += 1
                continue
            record.org_id, record.user_id = vault.org, vault.user
            record.key_version = tx.epoch
            home = TYPE_HOME[record.type][0]
            if home in DOC_FILES:
                doc = docs.setdefault(home, store.read_doc(home) or {"format": 1,
                                                                     "records": []})
                doc["records"].append(record.stored())
            else:
                assert record.session_id is not None
                lines.setdefault(session_file(record.session_id, archived), []).append(record)
            new.append((record, archived))
            imported += 1
        current = prefs_ops.read(vault)
        new_prefs = {k: v for k, v in prefs.items() if k not in current}
        if new_prefs:
            doc = docs.setdefault("preferences.json", store.read_doc("preferences.json") or
                                  {"format": 1, "records": []})
            settings = doc.setdefault("settings", {})
            for k, v in new_prefs.items():
                settings[k] = {"value": v, "updated_at": now_iso()}
        progress.start(len(docs) + len(lines), "files")
        for home, doc in docs.items():
            for r in doc["records"]:
                r["key_version"] = tx.epoch
            tx.write_doc(home, doc)
            progress.advance()
        for relpath, records in lines.items():
            records.sort(key=lambda r: (r.created_at, r.memory_id))
            tx.append(relpath, records)
            progress.advance()
        _link(tx.state, new, existing)
        tx.touch()
        tx.audit("import", [r.memory_id for r, _ in new], imported=imported, skipped=skipped)
        progress.note("rebuilding the search index")
        tx.rebuild_indexes()
    progress.keep(imported)
    return ImportResult(imported, skipped, len(new_prefs))


def _link(state: UserState, new: list[tuple[Record, bool]], existing: set[str]) -> None:
    """Count the imported records and link the ones they supersede."""
    archived_ids = {r.memory_id for r, archived in new if archived}
    present = existing | {r.memory_id for r, _ in new}
    for record, archived in new:
        state.count(record.type, +1, archived=archived)
        if record.supersedes and record.supersedes in present:
            state.superseded[record.supersedes] = Superseded(
                record.memory_id, record.supersedes in archived_ids)
