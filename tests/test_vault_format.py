"""docs/vault-format.md is normative: its test vectors must match what the code produces.

The vectors are parsed out of the document itself, so the test fails when either the
document or the code drifts. An independent implementation of the document's prose
(hmac, hashlib and the AES-GCM primitive only) must reproduce them too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memvault.config import resolve
from memvault.crypto import envelope as crypto
from memvault.crypto.keys import MasterKey, index_key, record_key
from memvault.errors import DataError, Refused
from memvault.model.records import Record
from memvault.ops import recall
from memvault.ops import verify as verify_op
from memvault.storage.audit import AuditLog
from memvault.storage.layout import UserLayout
from memvault.storage.state import UserState
from memvault.storage.userstore import UserStore
from memvault.vault.keysource import load_master_key
from memvault.vault.vault import Vault

DOC = Path(__file__).resolve().parents[1] / "docs" / "vault-format.md"
BLOCK = re.compile(r"^```vector\n(.*?)^```", re.MULTILINE | re.DOTALL)

HEX = {
    "master_key", "dek", "dek_nonce", "file_nonce", "line_nonce", "kek_info", "kek",
    "record_key", "index_key", "meta_key", "org_audit_key", "key_check_value", "dek_aad",
    "wrapped_dek", "file_aad", "file_envelope", "line_aad", "state_mac", "audit_hash",
    "passphrase_kek", "index_tag_work", "index_session_s1",
}
TEXT = {
    "org", "user", "epoch", "file_relpath", "line_relpath", "memory_id", "timestamp",
    "file_plaintext", "line_plaintext", "line_envelope", "state_canonical",
    "audit_content_hash", "audit_entry_1", "audit_entry_2", "master_key_file", "passphrase",
    "passphrase_aad", "passphrase_key_file", "index_text", "index_stems", "index_tokens",
}


def load_vectors(text: str) -> dict[str, str]:
    """Every `name: value` line of every ```vector block; names must be unique."""
    vectors: dict[str, str] = {}
    for block in BLOCK.findall(text):
        for line in block.splitlines():
            if not line.strip():
                continue
            name, sep, value = line.partition(": ")
            assert sep, f"vector line without 'name: value': {line!r}"
            assert name not in vectors, f"vector {name!r} appears twice"
            vectors[name] = value
    return vectors


class Vectors:
    def __init__(self, raw: dict[str, str]) -> None:
        self.raw = raw

    def __getitem__(self, name: str) -> str:
        assert name in TEXT, f"{name} is not a text vector"
        return self.raw[name]

    def b(self, name: str) -> bytes:
        assert name in HEX, f"{name} is not a hex vector"
        return bytes.fromhex(self.raw[name])

    @property
    def org(self) -> str:
        return self["org"]

    @property
    def user(self) -> str:
        return self["user"]

    @property
    def epoch(self) -> int:
        return int(self["epoch"])

    @property
    def master(self) -> MasterKey:
        return MasterKey(self.b("master_key"), "test vectors")


@pytest.fixture(scope="module")
def v() -> Vectors:
    return Vectors(load_vectors(DOC.read_text(encoding="utf-8")))


def test_document_holds_exactly_the_expected_vectors(v: Vectors) -> None:
    assert set(v.raw) == HEX | TEXT
    for name in HEX:
        assert re.fullmatch(r"(?:[0-9a-f]{2})+", v.raw[name]), f"{name} is not lowercase hex"
    assert v.b("master_key") == bytes(range(32))
    assert (v.org, v.user, v.epoch) == ("acme", "alice", 1)


def test_vector_parser_refuses_duplicates() -> None:
    with pytest.raises(AssertionError, match="twice"):
        load_vectors("```vector\na: 00\n```\n\n```vector\na: 01\n```\n")


# --- the code produces the vectors --------------------------------------------------------


def test_length_prefixed_info(v: Vectors) -> None:
    assert crypto.lp("mem/v1/kek", v.org, v.user, str(v.epoch)) == v.b("kek_info")


def test_derived_keys(v: Vectors) -> None:
    master = v.master
    assert master.kek(v.org, v.user, v.epoch) == v.b("kek")
    assert master.meta_key(v.org, v.user) == v.b("meta_key")
    assert master.org_audit_key(v.org) == v.b("org_audit_key")
    assert master.check_value() == v.b("key_check_value").hex()
    assert crypto.key_check_value(v.b("master_key")) == v.b("key_check_value").hex()
    assert record_key(v.b("dek")) == v.b("record_key")
    assert index_key(v.b("dek")) == v.b("index_key")


def test_wrapped_dek(v: Vectors) -> None:
    kek = v.b("kek")
    blob = crypto.wrap_dek(kek, v.epoch, v.org, v.user, v.b("dek"), nonce=v.b("dek_nonce"))
    assert blob == v.b("wrapped_dek")
    assert len(blob) == 69
    assert crypto.lp(crypto.TAG_DEK, v.org, v.user, str(v.epoch)) == v.b("dek_aad")
    assert crypto.unwrap_dek(kek, v.epoch, v.org, v.user, blob) == v.b("dek")


@pytest.mark.parametrize(("org", "user"), [("acme", "bob"), ("other", "alice")])
def test_wrapped_dek_fails_for_another_user(v: Vectors, org: str, user: str) -> None:
    with pytest.raises(crypto.AuthError):
        crypto.unwrap_dek(v.b("kek"), v.epoch, org, user, v.b("wrapped_dek"))
    with pytest.raises(crypto.AuthError):  # and under that user's own KEK
        crypto.unwrap_dek(v.master.kek(org, user, v.epoch), v.epoch, org, user,
                          v.b("wrapped_dek"))


def test_wrapped_dek_header_must_match_its_epoch(v: Vectors) -> None:
    with pytest.raises(DataError):
        crypto.unwrap_dek(v.b("kek"), 2, v.org, v.user, v.b("wrapped_dek"))
    with pytest.raises(DataError):
        crypto.unwrap_dek(v.b("kek"), v.epoch, v.org, v.user, v.b("wrapped_dek")[:-1])


def test_file_envelope(v: Vectors) -> None:
    relpath, plain = v["file_relpath"], v["file_plaintext"].encode()
    assert crypto.file_aad(v.org, v.user, relpath, v.epoch) == v.b("file_aad")
    blob = crypto.seal_file(v.b("record_key"), v.epoch, v.org, v.user, relpath, plain,
                            nonce=v.b("file_nonce"))
    assert blob == v.b("file_envelope")
    assert crypto.file_key_version(blob) == v.epoch
    assert crypto.open_file(v.b("record_key"), v.org, v.user, relpath, blob) == plain
    assert json.loads(plain) == {"format": 1, "records": []}


@pytest.mark.parametrize(("org", "user", "relpath"), [
    ("acme", "alice", "preferences.json"),
    ("acme", "bob", "CLAUDE.md"),
    ("other", "alice", "CLAUDE.md"),
])
def test_file_envelope_fails_under_a_wrong_aad(v: Vectors, org: str, user: str,
                                               relpath: str) -> None:
    with pytest.raises(crypto.AuthError):
        crypto.open_file(v.b("record_key"), org, user, relpath, v.b("file_envelope"))


def test_file_envelope_key_version_is_authenticated(v: Vectors) -> None:
    blob = bytearray(v.b("file_envelope"))
    blob[8] = 2  # the header's key version, bound into the AAD
    with pytest.raises(crypto.AuthError):
        crypto.open_file(v.b("record_key"), v.org, v.user, v["file_relpath"], bytes(blob))


def test_file_envelope_every_flipped_byte_is_refused(v: Vectors) -> None:
    original = v.b("file_envelope")
    for i in range(len(original)):
        blob = bytearray(original)
        blob[i] ^= 0x01
        with pytest.raises((crypto.AuthError, DataError)):
            crypto.open_file(v.b("record_key"), v.org, v.user, v["file_relpath"], bytes(blob))
    with pytest.raises((crypto.AuthError, DataError)):
        crypto.open_file(v.b("record_key"), v.org, v.user, v["file_relpath"], original[:-1])


def test_line_envelope(v: Vectors) -> None:
    relpath, mid, ts = v["line_relpath"], v["memory_id"], v["timestamp"]
    plain = v["line_plaintext"].encode()
    assert crypto.line_aad(v.org, v.user, relpath, mid, ts, v.epoch) == v.b("line_aad")
    line = crypto.seal_line(v.b("record_key"), v.epoch, v.org, v.user, relpath, mid, ts, plain,
                            nonce=v.b("line_nonce"))
    assert line == v["line_envelope"].encode() + b"\n"
    doc = crypto.parse_line(line.rstrip(b"\n"))
    assert list(doc) == ["v", "kv", "id", "ts", "n", "ct"]
    assert crypto.open_line(v.b("record_key"), v.org, v.user, relpath, doc) == plain


def test_line_plaintext_is_a_stored_record(v: Vectors) -> None:
    record = Record.from_stored(json.loads(v["line_plaintext"]))
    assert record.memory_id == v["memory_id"] and record.created_at == v["timestamp"]
    assert (record.org_id, record.user_id, record.type) == (v.org, v.user, "message")
    assert record.content_hash == crypto.content_hash(record.content)
    assert record.session_id == "s1" and record.key_version == v.epoch
    stored = json.dumps(record.stored(), ensure_ascii=False, separators=(",", ":"))
    assert stored == v["line_plaintext"]


@pytest.mark.parametrize(("org", "user", "relpath"), [
    ("acme", "alice", "sessions/s2.jsonl"),
    ("acme", "alice", "archive/s1.jsonl"),
    ("acme", "bob", "sessions/s1.jsonl"),
    ("other", "alice", "sessions/s1.jsonl"),
])
def test_line_envelope_fails_under_a_wrong_aad(v: Vectors, org: str, user: str,
                                               relpath: str) -> None:
    doc = crypto.parse_line(v["line_envelope"].encode())
    with pytest.raises(crypto.AuthError):
        crypto.open_line(v.b("record_key"), org, user, relpath, doc)


def test_line_envelope_needs_canonical_base64(v: Vectors) -> None:
    doc = crypto.parse_line(v["line_envelope"].encode())
    ct = str(doc["ct"])
    assert ct.endswith("==")
    last = ct[-3]  # its low 4 bits are padding: a reader must not ignore them
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    doc["ct"] = ct[:-3] + alphabet[alphabet.index(last) ^ 1] + "=="
    with pytest.raises(crypto.AuthError):
        crypto.open_line(v.b("record_key"), v.org, v.user, v["line_relpath"], doc)


@pytest.mark.parametrize(("field", "value"), [
    ("id", "018cc251-f400-7abc-8def-0123456789ac"),
    ("ts", "2024-01-01T00:00:00.000001Z"),
    ("kv", 2),
])
def test_line_envelope_clear_fields_are_authenticated(v: Vectors, field: str,
                                                      value: Any) -> None:
    doc = crypto.parse_line(v["line_envelope"].encode())
    doc[field] = value
    with pytest.raises(crypto.AuthError):
        crypto.open_line(v.b("record_key"), v.org, v.user, v["line_relpath"], doc)


def test_state_mac(v: Vectors, tmp_path: Path) -> None:
    store = UserStore(UserLayout(tmp_path, v.org, v.user), v.master)
    store.dir.mkdir(parents=True)
    state = json.loads(v["state_canonical"])
    store.save_state(UserState.from_doc(state))
    on_disk = json.loads(store.layout.path("state.json").read_text())
    assert on_disk == {"state": state, "mac": v.b("state_mac").hex()}
    assert store.load_state() == UserState.from_doc(state)
    assert store.load_state().to_doc() == state

    on_disk["state"]["frozen"] = True
    store.layout.path("state.json").write_text(json.dumps(on_disk))
    with pytest.raises(DataError):
        store.load_state()


def test_state_mac_fails_for_another_user(v: Vectors, tmp_path: Path) -> None:
    store = UserStore(UserLayout(tmp_path, v.org, "bob"), v.master)
    store.dir.mkdir(parents=True)
    doc = {"state": json.loads(v["state_canonical"]), "mac": v.b("state_mac").hex()}
    store.layout.path("state.json").write_text(json.dumps(doc))
    with pytest.raises(DataError):
        store.load_state()


def _audit(tmp_path: Path, key: bytes, lines: list[str]) -> AuditLog:
    path = tmp_path / "audit.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return AuditLog(path, tmp_path / ".audit.lock", key, 2.0)


def test_audit_chain(v: Vectors, tmp_path: Path) -> None:
    meta = v.master.meta_key(v.org, v.user)
    log = _audit(tmp_path, meta, [v["audit_entry_1"], v["audit_entry_2"]])
    check = log.check()
    assert check.ok and [e["seq"] for e in check.entries] == [1, 2]
    assert log.hash_of(v["audit_content_hash"]) == v.b("audit_hash").hex()
    assert v["audit_content_hash"] == crypto.content_hash("Hello")
    # A real append continues the chain from the vectors' last entry.
    log.append("verify", durable=False, ok=True, problems=0)
    check = log.check()
    assert check.ok and check.entries[-1]["seq"] == 3
    assert check.entries[-1]["prev"] == json.loads(v["audit_entry_2"])["mac"]


def test_audit_chain_detects_removed_and_edited_entries(v: Vectors, tmp_path: Path) -> None:
    meta = v.master.meta_key(v.org, v.user)
    assert not _audit(tmp_path, meta, [v["audit_entry_2"]]).check().ok
    assert not _audit(tmp_path, meta, [v["audit_entry_2"], v["audit_entry_1"]]).check().ok
    edited = v["audit_entry_2"].replace('"deduplicated":false', '"deduplicated":true')
    assert edited != v["audit_entry_2"]
    assert not _audit(tmp_path, meta, [v["audit_entry_1"], edited]).check().ok
    other = v.master.meta_key(v.org, "bob")
    assert not _audit(tmp_path, other, [v["audit_entry_1"], v["audit_entry_2"]]).check().ok


def test_index_tokens(v: Vectors) -> None:
    from memvault.index.keyed import Analyzer

    analyzer = Analyzer(v.b("index_key"))
    assert analyzer.tokens(v["index_text"]) == v["index_stems"].split()
    assert analyzer.hashed(v["index_text"]) == v["index_tokens"]
    assert analyzer.opaque("tag", "work") == v.b("index_tag_work").hex()
    assert analyzer.opaque("session", "s1") == v.b("index_session_s1").hex()


def _key_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "vector.key"
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_plain_master_key_file(v: Vectors, tmp_path: Path) -> None:
    path = _key_file(tmp_path, v["master_key_file"] + "\n")
    assert load_master_key(resolve(key_file=path)).key == v.b("master_key")


def test_passphrase_master_key_file(v: Vectors, tmp_path: Path) -> None:
    path = _key_file(tmp_path, v["passphrase_key_file"])
    master = load_master_key(resolve(key_file=path), passphrase=v["passphrase"])
    assert master.key == v.b("master_key")
    with pytest.raises(Refused):
        load_master_key(resolve(key_file=path), passphrase=v["passphrase"] + "!")


def test_a_vault_assembled_from_the_vectors_opens(v: Vectors, tmp_path: Path) -> None:
    """The layout of the document, written by hand from the vectors, is a vault mem reads."""
    root = tmp_path / "assembled"
    user_dir = root / v.org / v.user
    for sub in ("keys", "sessions", "archive"):
        (user_dir / sub).mkdir(parents=True)
    meta = {"format": 1, "created_at": v["timestamp"], "key_check": v.b("key_check_value").hex(),
            "kdf": "HKDF-SHA256", "cipher": "AES-256-GCM"}
    (root / "vault.json").write_text(json.dumps(meta, indent=1) + "\n")
    (user_dir / "keys" / "1.dek").write_bytes(v.b("wrapped_dek"))
    (user_dir / "CLAUDE.md").write_bytes(v.b("file_envelope"))
    (user_dir / "sessions" / "s1.jsonl").write_text(v["line_envelope"] + "\n")
    state = {"state": json.loads(v["state_canonical"]), "mac": v.b("state_mac").hex()}
    (user_dir / "state.json").write_text(json.dumps(state, indent=1) + "\n")
    (user_dir / "audit.jsonl").write_text(v["audit_entry_1"] + "\n" + v["audit_entry_2"] + "\n")

    vault = Vault(resolve(vault=root, org=v.org, user=v.user), master=v.master)
    assert recall.show(vault, v["memory_id"]).record.content == "Hello"
    report = verify_op.verify(vault).to_dict()
    assert report["problems"] == [] and report["ok"]
    assert report["records_checked"] == 1


# --- an independent implementation of the prose reproduces the vectors -----------------


def _lp(*fields: str | bytes) -> bytes:
    out = b""
    for field in fields:
        raw = field.encode() if isinstance(field, str) else field
        out += len(raw).to_bytes(4, "big") + raw
    return out


def _hkdf(ikm: bytes, *info: str) -> bytes:
    """RFC 5869 with SHA-256, no salt (32 zero bytes), 32 bytes of output: one block."""
    prk = hmac.new(b"\0" * 32, ikm, hashlib.sha256).digest()
    return hmac.new(prk, _lp(*info) + b"\x01", hashlib.sha256).digest()


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _gcm(key: bytes, nonce: bytes, plain: bytes, aad: bytes) -> bytes:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key).encrypt(nonce, plain, aad)


def test_independent_key_derivation(v: Vectors) -> None:
    master, dek, epoch = v.b("master_key"), v.b("dek"), str(v.epoch)
    assert _lp("mem/v1/kek", v.org, v.user, epoch) == v.b("kek_info")
    assert _hkdf(master, "mem/v1/kek", v.org, v.user, epoch) == v.b("kek")
    assert _hkdf(master, "mem/v1/meta", v.org, v.user) == v.b("meta_key")
    assert _hkdf(master, "mem/v1/org-audit", v.org) == v.b("org_audit_key")
    assert _hkdf(master, "mem/v1/check")[:16] == v.b("key_check_value")
    assert _hkdf(dek, "mem/v1/record") == v.b("record_key")
    assert _hkdf(dek, "mem/v1/index") == v.b("index_key")


def test_independent_envelopes(v: Vectors) -> None:
    epoch = v.epoch
    header = b"MEMK" + bytes([1]) + epoch.to_bytes(4, "big")
    aad = _lp("mem/dek/v1", v.org, v.user, str(epoch))
    assert aad == v.b("dek_aad")
    nonce = v.b("dek_nonce")
    assert header + nonce + _gcm(v.b("kek"), nonce, v.b("dek"), aad) == v.b("wrapped_dek")

    header = b"MEMF" + bytes([1]) + epoch.to_bytes(4, "big")
    aad = _lp("mem/file/v1", v.org, v.user, v["file_relpath"], "", "", str(epoch))
    assert aad == v.b("file_aad")
    nonce, plain = v.b("file_nonce"), v["file_plaintext"].encode()
    assert header + nonce + _gcm(v.b("record_key"), nonce, plain, aad) == v.b("file_envelope")

    mid, ts = v["memory_id"], v["timestamp"]
    aad = _lp("mem/line/v1", v.org, v.user, v["line_relpath"], mid, ts, str(epoch))
    assert aad == v.b("line_aad")
    nonce, plain = v.b("line_nonce"), v["line_plaintext"].encode()
    line = {"v": 1, "kv": epoch, "id": mid, "ts": ts,
            "n": base64.b64encode(nonce).decode(),
            "ct": base64.b64encode(_gcm(v.b("record_key"), nonce, plain, aad)).decode()}
    assert json.dumps(line, separators=(",", ":")) == v["line_envelope"]


def test_independent_state_and_audit_macs(v: Vectors) -> None:
    meta = v.b("meta_key")
    state = json.loads(v["state_canonical"])
    assert _canonical(state).decode() == v["state_canonical"]
    assert hmac.new(meta, _canonical(state), hashlib.sha256).digest() == v.b("state_mac")
    content_hash = "sha256:" + hashlib.sha256(b"Hello").hexdigest()
    assert content_hash == v["audit_content_hash"]
    keyed = hmac.new(meta, content_hash.encode(), hashlib.sha256).digest()[:16]
    assert keyed == v.b("audit_hash")
    prev = "0" * 64
    for seq, name in enumerate(("audit_entry_1", "audit_entry_2"), start=1):
        entry = json.loads(v[name])
        body = {k: val for k, val in entry.items() if k != "mac"}
        assert list(entry) == ["v", "seq", "audit_id", "ts", "op", "actor", "ids", "hashes",
                               "detail", "prev", "mac"]
        assert body["seq"] == seq and body["prev"] == prev
        assert entry["mac"] == hmac.new(meta, _canonical(body), hashlib.sha256).hexdigest()
        prev = entry["mac"]


def test_independent_index_tokens(v: Vectors) -> None:
    key = v.b("index_key")

    def token(data: str) -> str:
        return hmac.new(key, data.encode(), hashlib.sha256).digest()[:16].hex()

    assert " ".join(token(t) for t in v["index_stems"].split()) == v["index_tokens"]
    assert token("\0tag\0work") == v.b("index_tag_work").hex()
    assert token("\0session\0s1") == v.b("index_session_s1").hex()


def test_independent_key_files(v: Vectors) -> None:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.argon2 import Argon2id

    assert base64.b64decode(v["master_key_file"], validate=True) == v.b("master_key")
    doc = json.loads(v["passphrase_key_file"])
    header = {"format": doc["format"], "params": doc["params"], "salt": doc["salt"]}
    assert json.dumps(header, sort_keys=True) == v["passphrase_aad"]
    params, salt = doc["params"], base64.b64decode(doc["salt"])
    assert params["kdf"] == "argon2id"
    kek = Argon2id(salt=salt, length=32, iterations=params["t"], lanes=params["p"],
                   memory_cost=params["m"]).derive(v["passphrase"].encode())
    assert kek == v.b("passphrase_kek")
    plain = AESGCM(kek).decrypt(base64.b64decode(doc["nonce"]), base64.b64decode(doc["ct"]),
                                v["passphrase_aad"].encode())
    assert plain == v.b("master_key")


@given(memory_id=st.text(max_size=40), ts=st.text(max_size=40),
       key_version=st.integers(min_value=1, max_value=2**31))
def test_a_line_envelope_is_the_json_the_format_names(memory_id: str, ts: str,
                                                     key_version: int) -> None:
    """The line is written by hand for speed: it must be byte for byte the compact JSON
    of its fields, in order, whatever an imported id or time holds."""
    nonce = bytes(range(12))
    line = crypto.seal_line(bytes(32), key_version, "o", "u", "sessions/s.jsonl", memory_id,
                            ts, b"{}", nonce=nonce)
    doc = json.loads(line)
    expected = {"v": 1, "kv": key_version, "id": memory_id, "ts": ts,
                "n": base64.b64encode(nonce).decode(), "ct": doc["ct"]}
    assert line == json.dumps(expected, separators=(",", ":")).encode() + b"\n"
