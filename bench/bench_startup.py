"""Cold start of the commands people and agents wait on (`--help`, add, list, search, show,
brief, stats, pref get, doctor, and the SessionStart hook) against a process that only
imports the same libraries (the floor), measured in the same run. Target: each ≤ 1.6× the
floor.

`python -X importtime -m memvault add x` shows what a command imports; tests/test_startup.py
keeps the heavy libraries out of the commands that do not use them."""

from __future__ import annotations

import json
import sys

from common import BIN, interleaved, median_ms, report, run_timed, throwaway_env

FLOOR = (
    "import typer, rich.console, rich.table, yaml, platformdirs\n"
    "from cryptography.hazmat.primitives.ciphers.aead import AESGCM\n"
    "from cryptography.hazmat.primitives.kdf.hkdf import HKDF\n"
)
TARGET = 1.6


def main(rounds: int = 21) -> dict[str, object]:
    env = throwaway_env()
    mem = str(BIN / "mem")
    run_timed([mem, "init"], env)
    for i in range(20):  # a user with some memory, so `list` decrypts real files
        run_timed([mem, "add", f"seed fact number {i}", "--tag", "seed"], env)
    run_timed([mem, "pref", "set", "editor", "helix"], env)
    listed = run_timed_json([mem, "list", "--json", "--limit", "1"], env)
    some_id = listed["records"][0]["memory_id"]  # type: ignore[index]
    start = json.dumps({"session_id": "bench", "hook_event_name": "SessionStart",
                        "source": "startup", "cwd": "/"}).encode()
    cases = {
        "floor (imports only)": lambda i: run_timed([sys.executable, "-c", FLOOR], env),
        "mem --help": lambda i: run_timed([mem, "--help"], env),
        "mem add": lambda i: run_timed([mem, "add", f"bench fact {i}"], env),
        "mem list": lambda i: run_timed([mem, "list"], env),
        "mem search": lambda i: run_timed([mem, "search", "seed fact"], env),
        "mem show": lambda i: run_timed([mem, "show", some_id], env),
        "mem brief": lambda i: run_timed([mem, "brief"], env),
        "mem stats": lambda i: run_timed([mem, "stats"], env),
        "mem pref get": lambda i: run_timed([mem, "pref", "get", "editor"], env),
        "mem doctor": lambda i: run_timed([mem, "doctor"], env),
        "SessionStart hook": lambda i: run_timed([mem, "hook", "claude-code"], env, start),
    }
    for case in cases.values():  # bytecode written once, as an install would have it
        case(-1)
    samples = interleaved(cases, rounds)
    floor = median_ms(samples["floor (imports only)"])
    rows = []
    print(f"{'case':<24}{'median ms':>12}{'× floor':>10}")
    for name, values in samples.items():
        ms = median_ms(values)
        ratio = ms / floor
        rows.append({"case": name, "median_ms": round(ms, 1), "ratio": round(ratio, 2)})
        verdict = "" if name.startswith("floor") else ("  ok" if ratio <= TARGET else "  OVER")
        print(f"{name:<24}{ms:>12.1f}{ratio:>10.2f}{verdict}")
    doc = {"rounds": rounds, "target_ratio": TARGET, "results": rows}
    report("startup", doc)
    return doc


def run_timed_json(argv: list[str], env: dict[str, str]) -> dict[str, object]:
    import subprocess

    done = subprocess.run(argv, env=env, capture_output=True, check=True)  # noqa: S603
    return dict(json.loads(done.stdout))


if __name__ == "__main__":
    main()
