#!/usr/bin/env python3
"""Several `perf_probe` binaries in turn: rounds in a random order, ratios to the first.

    rr_probe.py REF,BIN,... [ROUNDS] -- run 100 async 300 [memory|redis]

Each round runs every binary once, in a fresh random order; each binary's figure is divided by
REF's figure of the same round. Prints, per binary, its median steps/s, the median of its
per-round ratios to REF, and in how many rounds it beat REF. ROUNDS defaults to 12. The
environment is passed through (PROBE_CT=1 PROBE_RAW=1 for the one-thread, plain-store figure;
AFK_TEST_REDIS_URL for Redis).

The many-binary form of `ab_probe.py`, for a bisection: the binaries share the machine's drift
within a round, so their ratios compare; repeat the whole sequence before trusting a
difference under 5% (see BENCHMARKS.md).
"""
import random, statistics, sys

from ab_probe import measure, split_argv


def usage():
    sys.exit(__doc__)


def main():
    head, args = split_argv(sys.argv[1:], (1, 2), usage)
    bins = head[0].split(",")
    if len(bins) < 2:
        usage()
    rounds = int(head[1]) if len(head) == 2 else 12
    got = {b: [] for b in bins}
    for r in range(rounds):
        order = bins[:]
        random.shuffle(order)
        for b in order:
            got[b].append(measure(b, args))
        print(f"round {r + 1}: " + ", ".join(f"{got[b][-1]:.0f}" for b in bins), flush=True)
    ref = bins[0]
    for b in bins:
        ratios = [x / y for x, y in zip(got[b], got[ref])]
        faster = sum(1 for q in ratios if q > 1)
        print(
            f"{b}: median {statistics.median(got[b]):.0f} steps/s, "
            f"ratio to {ref} {statistics.median(ratios):.3f} (faster in {faster} of {rounds})"
        )


if __name__ == "__main__":
    main()
