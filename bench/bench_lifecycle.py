"""Lifecycle speed on a 100,000-record user (1,000 sessions of 100 LoCoMo messages):
forget one session, export everything to a JSON file, and rotate-key --now. Each is the
median of a few interleaved rounds, with its ratio to a same-run baseline: reading and
decrypting every record (what every one of them has to do at least once). A full index
rebuild is timed too, since forget and rotation each end with one."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from bench_search import fill, texts
from common import interleaved, report

SIZE = 100_000
ROUNDS = 3
USER = "big"


def main(rounds: int = ROUNDS) -> dict[str, object]:
    base = Path(tempfile.mkdtemp(prefix="mem-bench-lifecycle-"))
    os.environ.update(MEM_VAULT=str(base / "vault"), MEM_CONFIG_DIR=str(base / "config"))
    for var in ("MEM_KEY_FILE", "MEM_KEY_COMMAND", "MEM_MASTER_KEY", "MEM_ORG", "MEM_USER"):
        os.environ.pop(var, None)
    from memvault.config import resolve
    from memvault.ops import forget, keys, portability
    from memvault.ops.admin import init
    from memvault.vault.vault import Vault

    init(resolve(user=USER))
    _, fill_s = fill(USER, SIZE, texts())
    Vault(resolve(user=USER)).ready_index()
    export_path = base / "export.json"

    def fresh() -> Vault:
        return Vault(resolve(user=USER))  # nothing cached, like a new `mem` process

    def decrypt_all(i: int) -> float:
        v = fresh()
        started = time.perf_counter()
        for _ in v.store.records(include_archive=True):
            pass
        return time.perf_counter() - started

    def rebuild(i: int) -> float:
        v = fresh()
        with v.transaction() as tx:
            started = time.perf_counter()
            tx.rebuild_indexes()
            return time.perf_counter() - started

    def forget_session(i: int) -> float:
        v = fresh()
        started = time.perf_counter()  # what `mem forget --session S` does
        plan = forget.select(v, [], f"s{i:05d}")
        forget.forget(v, plan)
        elapsed = time.perf_counter() - started
        assert len(plan.targets) == 100, len(plan.targets)
        return elapsed

    def export(i: int) -> float:
        v = fresh()
        started = time.perf_counter()  # what `mem export -o FILE` does
        portability.export_to_file(v, export_path)
        return time.perf_counter() - started

    def rotate_now(i: int) -> float:
        v = fresh()
        started = time.perf_counter()
        result = keys.rotate_key(v, now=True)
        elapsed = time.perf_counter() - started
        assert result.keys_deleted == (result.key_version - 1,), result
        return elapsed

    cases = {
        "baseline: decrypt every record": decrypt_all,
        "index rebuild": rebuild,
        "forget one session (100 messages)": forget_session,
        "export to a JSON file": export,
        "rotate-key --now": rotate_now,
    }
    samples = interleaved(cases, rounds)
    floor = statistics.median(samples["baseline: decrypt every record"])
    rows: dict[str, object] = {}
    print(f"{SIZE} records ({SIZE // 100} sessions × 100), filled in {fill_s:.1f} s; "
          f"median of {rounds} interleaved runs (forget removes 100 records per run)")
    print(f"{'case':<36} {'median s':>9} {'ratio':>7}   runs s")
    for name, values in samples.items():
        median = statistics.median(values)
        rows[name] = {"median_s": round(median, 3), "ratio": round(median / floor, 2),
                      "runs_s": [round(x, 3) for x in values]}
        print(f"{name:<36} {median:9.3f} {median / floor:6.2f}×   "
              + " ".join(f"{x:.2f}" for x in values))
    doc: dict[str, object] = {
        "records": SIZE, "sessions": SIZE // 100, "rounds": rounds,
        "fill seconds": round(fill_s, 1),
        "export bytes": export_path.stat().st_size,
        "cases": rows,
    }
    report("lifecycle", doc)
    return doc


if __name__ == "__main__":
    main()
