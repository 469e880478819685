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
        entry = {"value": value, "updated_at": now_iso()}
        doc.setdefault("settings", {})[key] = entry
        for r in doc.get("records", []):
            r["key_version"] = tx.epoch
        tx.write_doc(PREFERENCES, doc)
        tx.audit("pref.set", hashes=[tx.hash_of(key)])
    return Pref(key, value, entry["updated_at"])


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
        removed = settings.pop(key)
        for r in doc.get("records", []):
            r["key_version"] = tx.epoch
        tx.write_doc(PREFERENCES, doc)
        tx.audit("pref.unset", hashes=[tx.hash_of(key)])
    return PrefRemoved(key, True, removed.get("value"))
