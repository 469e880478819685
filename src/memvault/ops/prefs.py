"""Key-value preferences (`mem pref`), kept encrypted in preferences.json beside the
preference records."""

from __future__ import annotations

from typing import Any

from memvault.errors import DataError, NotFound
from memvault.model.records import PREFERENCES, check_pref_key, now_iso
from memvault.model.results import Pref, PrefList, PrefRemoved
from memvault.ops.admission import AdmissionPolicy
from memvault.vault.vault import Vault


def settings_of(doc: dict[str, Any] | None) -> dict[str, Any]:
    settings = (doc or {}).get("settings", {})
    if not isinstance(settings, dict):
        raise DataError(f"{PREFERENCES} holds malformed settings")
    return settings


def read(vault: Vault) -> dict[str, Any]:
    """Every preference setting: key → {"value", "updated_at"}. The state is read first:
    a damaged user (its state lost) or one half destroyed is refused, as by every read."""
    if not vault.exists():
        return settings_of(None)
    vault.state()
    return settings_of(vault.store.read_doc(PREFERENCES))


def set_(vault: Vault, key: str, value: str) -> Pref:
    check_pref_key(key)
    policy = AdmissionPolicy(vault.settings)
    value = policy.admit(value)
    policy.admit_key(key)
    with vault.transaction() as tx:
        doc = tx.store.read_doc(PREFERENCES) or {"format": 1, "records": []}
        entry = {"value": value, "updated_at": stamp(doc, key)}
        doc.setdefault("settings", {})[key] = entry
        doc.get("unset", {}).pop(key, None)
        for r in doc.get("records", []):
            r["key_version"] = tx.epoch
        tx.write_doc(PREFERENCES, doc)
        tx.audit("pref.set", hashes=[tx.hash_of(key)])
    return Pref(key, value, entry["updated_at"])


def stamp(doc: dict[str, Any], key: str) -> str:
    """The time of a change to `key`: now, or just after the key's last change when the
    clock reads earlier (one synced from a machine whose clock runs ahead), so a change
    made after seeing another always wins over it (docs/sync.md)."""
    from datetime import datetime, timedelta

    now = now_iso()
    before = max(str(settings_of(doc).get(key, {}).get("updated_at", "")),
                 str(doc.get("unset", {}).get(key, "")))
    if now > before:
        return now
    after = datetime.fromisoformat(before) + timedelta(microseconds=1)
    return after.isoformat(timespec="microseconds").replace("+00:00", "Z")


def entries(vault: Vault) -> dict[str, tuple[str, str | None]]:
    """Every setting and every unset (value None: a tombstone, kept so that a sync
    carries it), key → (time, value)."""
    if not vault.exists():
        return {}
    vault.state()
    doc = vault.store.read_doc(PREFERENCES) or {}
    out: dict[str, tuple[str, str | None]] = {
        k: (str(at), None) for k, at in doc.get("unset", {}).items()}
    for k, v in settings_of(doc).items():
        if k not in out or str(v["updated_at"]) > out[k][0]:
            out[k] = (str(v["updated_at"]), str(v["value"]))
    return out


def apply(vault: Vault, winners: dict[str, tuple[str, str | None]]) -> None:
    """Write entries another machine made that win over this one's (the sync decides),
    with their own times: a set, or an unset (None)."""
    if not winners:
        return
    with vault.transaction(allow_frozen=True) as tx:
        doc = tx.store.read_doc(PREFERENCES) or {"format": 1, "records": []}
        settings, gone = doc.setdefault("settings", {}), doc.setdefault("unset", {})
        for key, (at, value) in winners.items():
            if value is None:
                settings.pop(key, None)
                gone[key] = at
            else:
                settings[key] = {"value": value, "updated_at": at}
                gone.pop(key, None)
        if not gone:
            del doc["unset"]
        for r in doc.get("records", []):
            r["key_version"] = tx.epoch
        tx.write_doc(PREFERENCES, doc)
        tx.audit("sync.prefs", hashes=[tx.hash_of(k) for k in sorted(winners)])


def drop_through(vault: Vault, at: str) -> int:
    """Remove every setting and unset made at or before `at` (a destroy made elsewhere
    at that time, applied here), leaving no tombstone: what a destroy took is gone, and
    later changes stay. The count removed."""
    if not vault.exists():
        return 0
    with vault.transaction(allow_frozen=True) as tx:
        doc = tx.store.read_doc(PREFERENCES)
        if doc is None:
            return 0
        settings, gone = settings_of(doc), doc.get("unset", {})
        old = [k for k, v in settings.items() if str(v["updated_at"]) <= at]
        old_unsets = [k for k, t in gone.items() if str(t) <= at]
        if not old and not old_unsets:
            return 0
        for k in old:
            del settings[k]
        for k in old_unsets:
            del gone[k]
        if "unset" in doc and not gone:
            del doc["unset"]
        for r in doc.get("records", []):
            r["key_version"] = tx.epoch
        tx.write_doc(PREFERENCES, doc)
        tx.audit("sync.destroy", hashes=[tx.hash_of(k) for k in sorted(old + old_unsets)])
    return len(old) + len(old_unsets)


def get(vault: Vault, key: str) -> Pref:
    check_pref_key(key)
    settings = read(vault)
    if key not in settings:
        raise NotFound(f"no preference named {key!r}")
    vault.audit_read("pref.get", hashes=[vault.audit.hash_of(key)])
    return Pref(key, settings[key]["value"], settings[key]["updated_at"])


def list_(vault: Vault) -> PrefList:
    settings = read(vault)
    vault.audit_read("pref.list", count=len(settings))
    return PrefList(tuple(Pref(k, v["value"], v["updated_at"])
                          for k, v in sorted(settings.items())))


def unset(vault: Vault, key: str) -> PrefRemoved:
    check_pref_key(key)
    with vault.transaction() as tx:
        doc = tx.store.read_doc(PREFERENCES) or {}
        settings = settings_of(doc)
        if key not in settings:
            raise NotFound(f"no preference named {key!r}")
        at = stamp(doc, key)
        removed = settings.pop(key)
        doc.setdefault("unset", {})[key] = at
        for r in doc.get("records", []):
            r["key_version"] = tx.epoch
        tx.write_doc(PREFERENCES, doc)
        tx.audit("pref.unset", hashes=[tx.hash_of(key)])
    return PrefRemoved(key, True, removed.get("value"))
