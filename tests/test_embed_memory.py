"""A first `mem embed` of a long history runs in memory that does not grow with it (issue
34, item 4: everything a hook starts runs in bounded memory): a session's every record
waiting, embedded batch by batch, holds what one batch holds from its start to its end.
The built-in model's tokeniser kept each short text it had seen (its cache's key is a
whole text), so a first embed grew by kilobytes a record, to 313 MB at 300,000."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memvault.embed.builtin import load
from memvault.model.location import session_file
from memvault.ops import embed
from memvault.ops.ingest import ingest_file
from memvault.vault.vault import Vault
from tests.test_vectors import stored

RECORDS = 12_000  # short turns, each its own text (under the tokeniser's 256 characters)
WORDS = ("kiln glaze clay slip bisque firing cone temperature studio wheel trimming handle "
         "mug bowl teapot lid foot ring wax resist underglaze celadon shino").split()

# The run in a process of its own (what a hook's background child is): its anonymous
# resident memory before each batch and at the end, with the built-in model.
CHILD = """
import json, sys
from memvault.config import resolve
from memvault.embed.builtin import load
from memvault.index import vectors
from memvault.ops import embed
from memvault.vault.vault import Vault

# Small segments merged sooner: the store's own cycle (a merged segment grows to SMALL,
# then a new one starts) settles within the run, so what is left to grow is what grows
# with the records embedded.
vectors.SMALL, vectors.MERGE_AT = 1024, 4

def anon():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("RssAnon:"))

class Watched:
    def __init__(self):
        self.model, self.inner, self.after = load().model, load(), []
    def embed(self, texts):
        self.after.append(anon())
        return self.inner.embed(texts)

watched = Watched()
done = embed.embed_pending(Vault(resolve()), watched).embedded
print(json.dumps({"embedded": done, "after": watched.after + [anon()]}))
"""


def chat(path: Path, count: int) -> Path:
    who = [("user", "alice"), ("user", "bob"), ("assistant", None)]
    with path.open("w") as fh:
        for n in range(count):
            role, name = who[n % 3]
            words = " ".join(WORDS[(n * 7 + j) % len(WORDS)] for j in range(24))
            fh.write(json.dumps({"role": role, **({"name": name} if name else {}),
                                 "content": f"{n}: {words}",
                                 "timestamp": f"2026-05-04T08:00:{n % 60:02d}Z"}) + "\n")
    return path


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_first_embed_holds_a_batch_however_many_records_wait(
        vault: Vault, tmp_path: Path) -> None:
    ingest_file(vault, chat(tmp_path / "chat.jsonl", RECORDS))
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["embedded"] == RECORDS
    after = out["after"]  # KiB, one a batch of 256
    # From 2,560 records in (model, store and buffers all made) to the end, 9,440 more
    # records: what grew is noise (under a megabyte here), not kilobytes a record (the
    # tokeniser's cache grew 65 MB here).
    settled = after[10]
    assert max(after[10:]) - settled < 4 * 1024, (settled, max(after[10:]))



def test_a_run_tells_the_store_where_each_record_lives_without_the_index(
        vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each vector is added with the file its record was read from: the index is never
    asked where a batch's records live (it read its document store for every batch, whose
    mapped pages grew a first embed with the history: 74 MB at 100,000 records, not 102)."""
    result = ingest_file(vault, chat(tmp_path / "chat.jsonl", 300))
    asked: list[int] = []
    real = Vault.search_index

    def watched(self: Vault, epoch: int) -> Any:
        asked.append(epoch)
        return real(self, epoch)

    monkeypatch.setattr(Vault, "search_index", watched)
    assert embed.embed_pending(vault, load(), batch=64).embedded == 300
    monkeypatch.undo()
    assert asked == []
    held = stored(vault)
    assert len(held) == 300
    assert {row["file"] for row in held.values()} == {session_file(result.session_id)}
