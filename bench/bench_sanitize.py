"""Terminal-control cleaning is linear: clean() and for_terminal() on hostile input of
1 MB and 10 MB. A backtracking or rescanning pattern would grow with the square of the
size (a ratio near 100) or take hours; a linear pass grows tenfold. Each figure is the
median of a few runs in this process; the ratio is 10 MB against 1 MB, measured in the
same run. Target: ratio <= 20 for every shape."""

from __future__ import annotations

import statistics
import sys
import time

from common import ROOT, report

TARGET_RATIO = 20.0

# Each shape at 1 MB; the long run repeats it tenfold.
SHAPES = {
    "csi": lambda n: "\x1b[" + "1;" * (n // 2),              # one endless CSI
    "osc-starts": lambda n: "\x1b]" * (n // 2),              # string starts, never ended
    "osc": lambda n: "\x1b]0;" + "a" * n,                    # one endless OSC
    "esc": lambda n: "\x1b" * n,                             # lone escapes
    "cut-csi": lambda n: ("\x1b[1" + "a" * 8) * (n // 11),   # CSIs cut short, text between
    "mixed": lambda n: "\x9b\x1b\x90\x07\r" * (n // 5),      # every kind of start
}


def _median(text: str, runs: int) -> float:
    from memvault.text.sanitize import clean, for_terminal

    times = []
    for _ in range(runs):
        start = time.perf_counter()
        clean(text)
        for_terminal(text)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(runs: int = 3) -> dict[str, object]:
    sys.path.insert(0, str(ROOT / "src"))
    rows = []
    print(f"{'shape':<12}{'1 MB s':>9}{'10 MB s':>9}{'ratio':>7}")
    for name, make in SHAPES.items():
        small, large = _median(make(1_000_000), runs), _median(make(10_000_000), runs)
        ratio = large / small
        verdict = "ok" if ratio <= TARGET_RATIO else "OVER"
        print(f"{name:<12}{small:>9.3f}{large:>9.3f}{ratio:>7.1f}   {verdict}")
        rows.append({"shape": name, "median_1mb_s": round(small, 4),
                     "median_10mb_s": round(large, 4), "ratio": round(ratio, 2)})
    doc = {"runs": runs, "target_ratio": TARGET_RATIO, "results": rows}
    report("sanitize", doc)
    return doc


if __name__ == "__main__":
    main()
