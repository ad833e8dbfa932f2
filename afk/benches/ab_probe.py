#!/usr/bin/env python3
"""A/B of two `perf_probe` binaries: alternating pairs in the same minutes, paired ratios.

    ab_probe.py OLD NEW [PAIRS] -- run 10 async 3000 [memory|redis]

Runs OLD and NEW one after the other PAIRS times (default 10), swapping which goes first
every pair (so a drift of the machine during the sequence falls on both sides), and prints
each measurement, both sides' medians, the median of the per-pair ratios NEW / OLD, and in how
many pairs NEW was faster. The environment is passed through (PROBE_CT=1 PROBE_RAW=1 for the
one-thread, plain-store figure; AFK_TEST_REDIS_URL for Redis).

Why pairs: on the 2-core bench VM, two binaries of identical code differ by up to ±5% over one
sequence of runs, and a CPU profile's share of a function does not predict what removing it
gains on this memory-bound path (see BENCHMARKS.md, 2026-12-01 21:42). A change is real when
the paired ratio is clear of that noise and most pairs agree.
"""
import json, statistics, subprocess, sys


def usage():
    sys.exit(__doc__)


def measure(binary, args):
    out = subprocess.run([binary] + args, check=True, capture_output=True, text=True).stdout
    line = next((l for l in out.splitlines() if l.startswith("{")), None)
    if line is None:
        sys.exit(f"{binary} printed no JSON line: {out!r}")
    return float(json.loads(line)["steps_per_s"])


def split_argv(argv, heads, usage):
    """The arguments before `--` (between heads[0] and heads[1] of them) and perf_probe's after
    it; `usage()` if they do not fit."""
    if "--" not in argv:
        usage()
    sep = argv.index("--")
    head, args = argv[:sep], argv[sep + 1:]
    if not heads[0] <= len(head) <= heads[1] or not args:
        usage()
    return head, args


def main():
    head, args = split_argv(sys.argv[1:], (2, 3), usage)
    old, new = head[0], head[1]
    pairs = int(head[2]) if len(head) == 3 else 10
    a, b, ratios = [], [], []
    for i in range(pairs):
        order = [("old", old), ("new", new)] if i % 2 == 0 else [("new", new), ("old", old)]
        got = {}
        for side, binary in order:
            got[side] = measure(binary, args)
        a.append(got["old"])
        b.append(got["new"])
        ratios.append(got["new"] / got["old"])
        print(f"pair {i + 1}: old {got['old']:.1f}  new {got['new']:.1f}  "
              f"new/old {ratios[-1]:.3f}", flush=True)
    faster = sum(r > 1 for r in ratios)
    print(f"old median {statistics.median(a):.1f} steps/s ({min(a):.1f}–{max(a):.1f})")
    print(f"new median {statistics.median(b):.1f} steps/s ({min(b):.1f}–{max(b):.1f})")
    print(f"paired new/old: median {statistics.median(ratios):.3f} "
          f"({min(ratios):.3f}–{max(ratios):.3f}); new faster in {faster} of {pairs} pairs")


if __name__ == "__main__":
    main()
