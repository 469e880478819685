"""The user's rights over their memory: forget, export, import, destroy, freeze, audit,
repair and key rotation (SPEC §6, §10).

Erasure is real: forgotten content leaves every file and the index, and a new key epoch
(at `--now`, or the next rotation) makes any leftover copy undecryptable.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mem import crypto, fsio
from mem.errors import DataError, NotFound, Refused, UsageError
from mem.records import (
    CATEGORIES,
    CLAUDE_MD,
    PREFERENCES,
    TYPE_HOME,
    TYPES,
    Filters,
    Record,
    normalise_time,
    now_iso,
    parse_time,
)

if TYPE_CHECKING:
    from mem.store import UserStore
    from mem.vault import Vault

EXPORT_VERSION = "1.0"
ORG_AUDIT = "audit.jsonl"


# --- forget -------------------------------------------------------------------------------


def select(vault: Vault, ids: list[str], session: str | None, before: datetime | None,
           tag: str | None, query: str | None) -> list[Record]:
    """The records a forget request names (every criterion given must match)."""
    if not (ids or session or before or tag or query):
        raise UsageError("name what to forget: ids, --session, --before, --tag or --query")
    records = vault._records(include_archive=True)
    chosen = records
    if ids:
        by_id = {r.memory_id: r for r in records}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise NotFound(f"no memory with id {missing[0]}" +
                           (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        chosen = [by_id[i] for i in dict.fromkeys(ids)]
    if session is not None:
        chosen = [r for r in chosen if r.session_id == session]
    if before is not None:
        chosen = [r for r in chosen if parse_time(r.created_at) < before]
    if tag is not None:
        chosen = [r for r in chosen if tag in r.tags]
    if query is not None:
        from mem.search import search

        index = vault.ready_index()
        stems = set(index.build_query(query, Filters())[1]) if records else set()
        if records and not stems:
            # A search for no words lists the most recent items: never "forget everything".
            raise UsageError(f"--query {query!r} has no words to search for; "
                             "nothing was forgotten")
        found = search(vault, query, Filters(limit=max(1, len(records)), include_archive=True,
                                             include_superseded=True))
        hit_ids = {r["memory_id"] for r in found["results"]}
        # Search ranks anything sharing a word (or a neighbour's word); erasure takes only
        # the records that themselves hold every word of the query.
        tokens = index.analyzer.tokens
        chosen = [r for r in chosen if r.memory_id in hit_ids
                  and stems <= set(tokens(r.content))]
    # Summaries compacted from a forgotten record hold its content too, and so do
    # summaries compacted from those.
    gone = {r.memory_id for r in chosen}
    derived: list[Record] = []
    while more := [r for r in records if r.memory_id not in gone and
                   set(r.compacted_from) & gone]:
        derived += more
        gone.update(r.memory_id for r in more)
    return chosen + derived


def forget(vault: Vault, targets: list[Record], now: bool = False) -> dict[str, Any]:
    """Remove the records from every file that holds them, then rebuild the index."""
    gone = {r.memory_id for r in targets}
    rewritten: list[str] = []
    with vault.writing() as store:
        epoch = store.current_epoch()
        for home in (CLAUDE_MD, PREFERENCES):
            doc = store.read_doc(home)
            if doc is None:
                continue
            kept = [r for r in doc.get("records", []) if r.get("memory_id") not in gone]
            if len(kept) != len(doc.get("records", [])):
                for r in kept:
                    r["key_version"] = epoch
                doc["records"] = kept
                store.write_doc(home, doc, epoch)
                rewritten.append(home)
        # A message lives in the line file of its session (live or archived): only those
        # files are read and rewritten, not every session of the user.
        sessions = {r.session_id for r in targets if r.type == "message" and r.session_id}
        for archived in (False, True):
            for rel in store.line_files(archived=archived):
                if rel.split("/", 1)[1].removesuffix(".jsonl") not in sessions:
                    continue
                records = store.read_lines(rel)
                kept_lines = [r for r in records if r.memory_id not in gone]
                if len(kept_lines) != len(records):
                    store.rewrite_lines(rel, kept_lines)
                    rewritten.append(rel)
        # A transcript ingested again (a hook, a scan) must not bring forgotten messages
        # back: remember them by keyed hash of session and message id.
        marks = [vault.message_mark(r.session_id, r.message_id) for r in targets
                 if r.type == "message" and r.session_id and r.message_id]
        if marks:
            state = store.load_state()
            state["forgotten"] = sorted(set(state.get("forgotten", [])) | set(marks))
            store.save_state(state)
        audit_id = vault.audit.append("forget", sorted(gone),
                                      [vault.audit.hash_of(r.content_hash) for r in targets],
                                      files=len(rewritten))
        # Deleted Tantivy documents keep their terms until a merge: rebuild instead.
        vault.rebuild_index()
        if now:
            _reencrypt(vault, store, new_epoch=True)
    return {"deleted_count": len(gone), "memory_ids": sorted(gone),
            "files_rewritten": rewritten, "audit_id": audit_id,
            "key_rotated": now}


# --- key epochs ---------------------------------------------------------------------------


def rotate_key(vault: Vault, now: bool = False) -> dict[str, Any]:
    with vault.writing() as store:
        result = _reencrypt(vault, store, new_epoch=True, rewrite=now)
    return result


def _reencrypt(vault: Vault, store: UserStore, new_epoch: bool,
               rewrite: bool = True) -> dict[str, Any]:
    """Start a new key epoch and (with `rewrite`) re-encrypt every live record under it,
    then delete the data keys nothing uses any more. Each step leaves a readable vault:
    files are replaced one at a time and old keys go last."""
    old = store.current_epoch()
    epoch = old + 1 if new_epoch else old
    if new_epoch:
        store.new_epoch(epoch)
        # The index key derives from the current data key: from here the index must be
        # rebuilt, even if this rotation is interrupted before it rewrites anything.
        vault._mark_index_stale()
        state = store.load_state()
        state["key_version"] = epoch
        store.save_state(state)
        vault.audit.append("key.rotate", key_version=epoch)
    rewritten = 0
    if rewrite:
        for home in (CLAUDE_MD, PREFERENCES):
            doc = store.read_doc(home)
            if doc is not None:
                for r in doc.get("records", []):
                    r["key_version"] = epoch
                store.write_doc(home, doc, epoch)
                rewritten += 1
        for archived in (False, True):
            for rel in store.line_files(archived=archived):
                records = store.read_lines(rel)
                if any(r.key_version != epoch for r in records):
                    for r in records:
                        r.key_version = epoch
                    store.rewrite_lines(rel, records)
                    rewritten += 1
    vault.reset_index()  # the index key derives from the current data key
    vault.rebuild_index()
    retired = retire_unused_keys(vault, store)
    return {"key_version": epoch, "files_reencrypted": rewritten, "keys_deleted": retired}


def keys_in_use(store: UserStore) -> set[int]:
    used = {store.current_epoch()}
    for home in (CLAUDE_MD, PREFERENCES):
        blob_path = store.path(home)
        if blob_path.exists():
            used.add(crypto.file_key_version(blob_path.read_bytes()))
    for archived in (False, True):
        for rel in store.line_files(archived=archived):
            used.update(r.key_version for r in store.read_lines(rel))
    return used


def retire_unused_keys(vault: Vault, store: UserStore) -> list[int]:
    used = keys_in_use(store)
    retired = [e for e in store.deks_on_disk() if e not in used]
    for epoch in retired:
        store.remove_dek(epoch)
    if retired:
        vault.audit.append("key.retire", key_versions=retired)
    return retired


# --- export and import ----------------------------------------------------------------


def export(vault: Vault, categories: list[str] | None = None) -> dict[str, Any]:
    """Every record (archived ones marked) and every preference, in the seed schema."""
    for c in categories or []:
        if c not in CATEGORIES:
            raise UsageError(f"unknown category {c!r}: choose one of {', '.join(CATEGORIES)}")
    wanted = categories or list(CATEGORIES)
    records = vault._records(include_archive=True)
    records.sort(key=lambda r: (r.created_at, r.memory_id))
    groups: dict[str, dict[str, Any]] = {c: {"count": 0, "records": []} for c in wanted}
    for r in records:
        if r.category in groups:
            groups[r.category]["records"].append(r.to_dict())
            groups[r.category]["count"] += 1
    prefs = {k: v["value"] for k, v in sorted(vault._prefs().items())} \
        if "preference" in wanted else {}
    doc = {"export_version": EXPORT_VERSION, "org_id": vault.settings.org,
           "user_id": vault.settings.user, "exported_at": now_iso(),
           "record_count": sum(g["count"] for g in groups.values()),
           "categories": groups, "preferences": prefs}
    vault.audit_read("export", count=doc["record_count"])
    return doc


def to_markdown(doc: dict[str, Any]) -> str:
    lines = [f"# Memory of {doc['org_id']}/{doc['user_id']}", "",
             f"Exported {doc['exported_at']}: {doc['record_count']} records.", ""]
    for category, group in doc["categories"].items():
        if not group["records"]:
            continue
        lines += [f"## {category.replace('_', ' ').capitalize()} ({group['count']})", ""]
        for r in group["records"]:
            flags = [r["type"], r["created_at"][:10]] + (["archived"] if r.get("archived")
                                                          else [])
            flags += ["superseded"] if r.get("superseded_by") else []
            where = f" (session {r['session_id']})" if r.get("session_id") else ""
            lines.append(f"- **{', '.join(flags)}**{where}: " + " ".join(r["content"].split()))
        lines.append("")
    if doc["preferences"]:
        lines += ["## Preference settings", ""]
        lines += [f"- `{k}`: {v}" for k, v in doc["preferences"].items()]
        lines.append("")
    return "\n".join(lines)


def write_export(text: str, output: str) -> None:
    if output == "-":
        return
    path = Path(output)
    if not path.parent.exists():
        raise NotFound(f"no directory {path.parent} for the export")
    fsio.atomic_write(path, text.encode())  # 0600: an export is plaintext


def _parse_import(raw: str) -> tuple[list[tuple[Record, bool]], dict[str, str]]:
    """Validate a whole export before anything is written (DataError on any flaw)."""
    from mem.config import validate_name

    try:
        doc = json.loads(raw)
    except ValueError:
        raise DataError("the import file is not JSON") from None
    if not isinstance(doc, dict) or doc.get("export_version") != EXPORT_VERSION:
        raise DataError(f"the import file is not a mem export (version {EXPORT_VERSION})")
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
            if record.content_hash != crypto.content_hash(record.content):
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
            seen.add(record.memory_id)
            out.append((record, bool(item.get("archived"))))
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in prefs.items()):
        raise DataError("the import file has malformed preferences")
    total = doc.get("record_count")
    if total != len(out):
        raise DataError(f"record_count says {total} but the file holds {len(out)} records")
    return out, prefs


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


def import_file(vault: Vault, raw: str) -> dict[str, Any]:
    """Restore an export: every record keeps its id; what is already there is skipped."""
    from mem.redact import scan

    items, prefs = _parse_import(raw)
    config = vault.settings.redaction()
    texts = [record.content for record, _ in items] + [t for kv in prefs.items() for t in kv]
    for text in texts:
        if not scan(text, config).clean:
            raise Refused("the import file holds a secret; nothing was imported")
    for record, _ in items:  # personal data gets placeholders, as on every other way in
        masked = scan(record.content, config).text
        if masked != record.content:
            record.content, record.content_hash = masked, crypto.content_hash(masked)
    prefs = {k: scan(v, config).text for k, v in prefs.items()}
    imported = skipped = 0
    with vault.writing() as store:
        epoch = store.current_epoch()
        existing = {r.memory_id for r in vault._records(include_archive=True)}
        docs: dict[str, dict[str, Any]] = {}
        lines: dict[str, list[Record]] = {}
        for record, archived in items:
            if record.memory_id in existing:
                skipped += 1
                continue
            record.org_id, record.user_id = vault.settings.org, vault.settings.user
            record.key_version = epoch
            home = TYPE_HOME[record.type][0]
            if home in (CLAUDE_MD, PREFERENCES):
                doc = docs.setdefault(home, store.read_doc(home) or {"format": 1,
                                                                     "records": []})
                doc["records"].append(record.stored())
            else:
                assert record.session_id is not None
                rel = store.session_relpath(record.session_id, archived=archived)
                lines.setdefault(rel, []).append(record)
            imported += 1
        current = vault._prefs()
        new_prefs = {k: v for k, v in prefs.items() if k not in current}
        if new_prefs:
            doc = docs.setdefault(PREFERENCES, store.read_doc(PREFERENCES) or
                                  {"format": 1, "records": []})
            settings = doc.setdefault("settings", {})
            for k, v in new_prefs.items():
                settings[k] = {"value": v, "updated_at": now_iso()}
        for home, doc in docs.items():
            for r in doc["records"]:
                r["key_version"] = epoch
            store.write_doc(home, doc, epoch)
        for rel, records in lines.items():
            records.sort(key=lambda r: (r.created_at, r.memory_id))
            store.append_records(rel, records)
        vault.audit.append("import", [r.memory_id for r, _ in items
                                      if r.memory_id not in existing],
                           imported=imported, skipped=skipped)
        vault.rebuild_index()
    return {"imported": imported, "skipped": skipped, "preferences_imported": len(new_prefs)}


# --- destroy, freeze, audit, repair ---------------------------------------------------


def destroy(vault: Vault, confirm: str | None) -> dict[str, Any]:
    user = vault.settings.user
    if confirm != user:
        raise Refused(f"destroy needs --confirm {user}: it deletes all of {user}'s memory "
                      "and keys for good; nothing was touched")
    if not vault.store.exists():
        raise NotFound(f"user {vault.settings.org}/{user} has no memory to destroy")
    with vault.writing() as store:
        records = len(vault._records(include_archive=True))
        docs = 0
        from mem.index import IndexUnavailable

        try:
            docs = int(vault.search_index().searcher().num_docs)
        except (IndexUnavailable, ValueError):
            docs = 0
        files = store.destroy()
    audit_id = org_audit(vault).append("user.destroy", user=user,
                                       records=records, files=files)
    return {"destroyed": f"{vault.settings.org}/{user}", "records_deleted": records,
            "files_deleted": files, "index_docs_deleted": docs, "audit_id": audit_id}


def org_audit(vault: Vault) -> Any:
    from mem.audit import AuditLog

    org_dir = vault.root / vault.settings.org
    return AuditLog(org_dir / ORG_AUDIT, org_dir / ".audit.lock",
                    vault.master.org_audit_key(vault.settings.org), vault.settings.lock_timeout)


def set_frozen(vault: Vault, frozen: bool) -> dict[str, Any]:
    with vault.writing(allow_frozen=True) as store:
        state = store.load_state()
        if bool(state.get("frozen")) != frozen:
            state["frozen"] = frozen
            store.save_state(state)
            vault.audit.append("freeze" if frozen else "unfreeze")
    return {"frozen": frozen}


def audit_log(vault: Vault) -> dict[str, Any]:
    if not vault.store.exists():
        return {"entries": [], "chain_ok": True}
    anchor = vault.store.load_state().get("audit_head")
    check = vault.audit.check(anchor)
    return {"entries": check.entries, "chain_ok": check.ok,
            "problems": [{"line": line, "problem": text} for line, text in check.problems]}


def repair(vault: Vault) -> dict[str, Any]:
    """Under the lock: cut torn tails, drop stale temp files and unused keys, rebuild the
    index. What an interrupted write or rotation left behind is set right."""
    actions: list[str] = []
    with vault.writing(allow_frozen=True) as store:
        for archived in (False, True):
            for rel in store.line_files(archived=archived):
                try:
                    if store.repair_tail(rel):
                        actions.append(f"cut a torn last line from {rel}")
                except DataError as exc:
                    actions.append(f"left {rel} alone: {exc.message}")
        if fsio.drop_torn_tail(vault.audit.path):
            actions.append("cut a torn last audit entry")
        # What follows reads every record: a damaged file stops it, and verify names it.
        try:
            retired = retire_unused_keys(vault, store)
            actions += [f"deleted unused data key {e}" for e in retired]
            vault.reset_index()
            count = vault.rebuild_index()
            actions.append(f"rebuilt the index ({count} records)")
        except DataError as exc:
            actions.append(f"could not rebuild the index or retire keys: {exc.message}")
    return {"repaired": actions}
