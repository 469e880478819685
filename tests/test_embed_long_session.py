"""A long session is embedded a line at a time (issue 34: a background `mem embed` after a
gigabyte's first ingest held the whole session file, every record of it at once): each
record beside the lines just before and after it, the same vectors as the whole file
read at once gives, and never its file whole in memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memvault.embed.builtin import load
from memvault.index.base import beside
from memvault.index.vectors import DIGEST_LEN, embed_text, vector_digest
from memvault.model.location import session_file
from memvault.ops import embed
from memvault.ops.ingest import ingest_file
from memvault.storage.userstore import UserStore
from memvault.vault.vault import Vault


def test_a_long_session_is_embedded_a_line_at_a_time(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    turns = []
    for n in range(60):  # people talking (their turns borrow from each other), an agent
        role, name = [("user", "alice"), ("user", "bob"), ("assistant", None)][n % 3]
        turns.append({"role": role, **({"name": name} if name else {}),
                      "content": f"turn {n}: the {['kiln', 'glaze', 'clay'][n % 3]} "
                                 f"fired at {900 + n} degrees",
                      "timestamp": f"2026-05-04T08:{n:02d}:00Z"})
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in turns))
    result = ingest_file(vault, path)
    relpath = session_file(result.session_id)
    whole: list[str] = []
    scan = UserStore.scan_lines

    def watched(self: UserStore, relpath: str) -> object:
        whole.append(relpath)  # a file read whole (its records all at once)
        return scan(self, relpath)

    monkeypatch.setattr(UserStore, "scan_lines", watched)
    assert embed.embed_pending(vault, load(), batch=7).embedded == len(turns)
    monkeypatch.undo()
    assert relpath not in whole
    records = vault.store.read_lines(relpath)
    held = vault.vector_store(vault.state().key_version).has()
    assert len(held) == len(records) == len(turns)
    for i, record in enumerate(records):  # as if the file were read whole
        digest = vector_digest(embed_text(record), beside(records, i))
        assert held[record.memory_id] == digest[:DIGEST_LEN].ljust(DIGEST_LEN, b"\0")
    assert embed.embed_pending(vault, load()).embedded == 0
