#!/usr/bin/env python3
"""Steps/s of AFK Python and of this project, side by side: same machine, same minutes.

For each repetition (REPS, default 3), run length n (NS, default "10,100") and write mode
(MODES, default "async,sync"), one AFK process and one of ours run back to back, the order
alternating per repetition; each process times its own runs. Prints one line per measurement
(JSON) and a Markdown table of medians with the 1-minute load seen during each case.

Workloads match: n tool-calling steps = n tool calls and n + 1 model calls on both sides (AFK's
peer driver `afk_nocount.py` with TOOL_STEPS=n and the driver's byte counting off, COUNT=0;
ours `perf_probe run n MODE RUNS` with the plain store, PROBE_RAW=1). Check the counts with
`afk_count.py` (AFK) and perf_probe's commit/round-trip counts (ours) before trusting a ratio.

Environment: PEER_DIR (driver scripts that run AFK's runner on this workload: `afk_nocount.py`,
`afk_steps.py`; not part of this repository), AFK_SRC (AFK's `src/`, https://github.com/socioy/afk
at bcc10b6), AFK_PY (a Python >= 3.13 with AFK's dependencies installed), PROBE (the release `perf_probe`:
`cargo build --release -p afk --example perf_probe`). Optional: REPS, NS, MODES, and
BACKENDS=memory,redis with AFK_TEST_REDIS_URL for Redis (ours needs `--features redis`), and
SAME_RUNS=1 to give ours as many runs per process as AFK (by default ours runs 10x more, so its
store holds 10x more records by the end; both stores slow down as they grow), and OURS_PRELOAD
(a malloc library, e.g. Debian's /usr/lib/x86_64-linux-gnu/libmimalloc.so.2) to run ours a
second time per case with that allocator preloaded (an application's choice of allocator; AFK
Python keeps CPython's own), shown in its own column, and OURS_CT=1 to run ours once more per
case on a current-thread tokio runtime (PROBE_CT=1: one thread, as AFK's asyncio loop is; the
default column is tokio's multi-thread runtime, what `#[tokio::main]` gives), in its own column,
and OURS_SPAWN=1 to run ours once more per case with the runs awaited from a task of the
multi-thread runtime (PROBE_SPAWN=1: as a server awaits runs from its request tasks, and as
AFK's driver awaits them inside its event loop) instead of from `block_on` on the main thread,
and OURS_FORGET=1 to run ours once more per memory case on one thread with a store that keeps
no record (PROBE_FORGET=1, PROBE_CT=1: fences and latest pointers only): not a store anyone can
use, a split of ours' time into the core's work and what keeping ~4 KB of new records per step
costs the in-memory store; its ratio is a diagnosis, not a result.
"""
import json, os, statistics, subprocess, sys, time

PEER = os.environ["PEER_DIR"]
PY = os.environ["AFK_PY"]
PROBE = os.environ["PROBE"]
REPS = int(os.environ.get("REPS", "3"))
NS = [int(x) for x in os.environ.get("NS", "10,100").split(",")]
MODES = os.environ.get("MODES", "async,sync").split(",")
PRELOAD = os.environ.get("OURS_PRELOAD")
CT = os.environ.get("OURS_CT") == "1"
SPAWN = os.environ.get("OURS_SPAWN") == "1"
BACKENDS = os.environ.get("BACKENDS", "memory").split(",")
# Runs per process: AFK is slower, so it gets fewer runs of the same length; both sides' store
# grows over a process's runs, so each side runs its own count every repetition.
RUNS = {("memory", 10): (100, 1000), ("memory", 100): (10, 100),
        ("redis", 10): (10, 200), ("redis", 100): (2, 30)}


def load():
    return float(open("/proc/loadavg").read().split()[0])


def afk(backend, n, mode):
    runs = RUNS[(backend, n)][0]
    env = dict(os.environ, AFK_SRC=os.environ["AFK_SRC"], TOOL_STEPS=str(n), RUNS=str(runs),
               ASYNC="1" if mode == "async" else "0", COUNT="0",
               AFK_LLM_MAX_INPUT_CHARS="1000000000")
    if backend == "memory":
        cmd = [PY, os.path.join(PEER, "afk_nocount.py")]
    else:
        env.update(STEPS=str(n + 1), BACKEND="redis", REDIS_URL=os.environ["AFK_TEST_REDIS_URL"])
        cmd = [PY, os.path.join(PEER, "afk_steps.py")]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    d = json.loads(out.strip().splitlines()[-1])
    return d["steps_per_s"] if "steps_per_s" in d and backend == "memory" else n * runs / d["seconds"]


FORGET = os.environ.get("OURS_FORGET") == "1"


def ours(backend, n, mode, preload=None, ct=False, spawn=False, forget=False):
    # SAME_RUNS=1: as many runs as AFK's process makes (the same store growth on both sides).
    runs = RUNS[(backend, n)][0 if os.environ.get("SAME_RUNS") == "1" else 1]
    env = dict(os.environ, PROBE_RAW="1")
    if preload:
        env["LD_PRELOAD"] = preload
    if ct:
        env["PROBE_CT"] = "1"
    if spawn:
        env["PROBE_SPAWN"] = "1"
    if forget:
        env["PROBE_FORGET"] = "1"
    out = subprocess.run([PROBE, "run", str(n), mode, str(runs), backend], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["steps_per_s"]


results = {}
for rep in range(REPS):
    for backend in BACKENDS:
        for n in NS:
            for mode in MODES:
                sides = [("afk", afk), ("ours", ours)]
                if PRELOAD:
                    sides.append(("ours_preload", lambda b, n, m: ours(b, n, m, PRELOAD)))
                if CT:
                    sides.append(("ours_ct", lambda b, n, m: ours(b, n, m, ct=True)))
                if SPAWN:
                    sides.append(("ours_spawn", lambda b, n, m: ours(b, n, m, spawn=True)))
                if FORGET and backend == "memory":
                    sides.append(("ours_forget", lambda b, n, m: ours(b, n, m, ct=True, forget=True)))
                if rep % 2:
                    sides.reverse()
                for name, f in sides:
                    l0 = load()
                    sps = f(backend, n, mode)
                    rec = {"rep": rep, "backend": backend, "n": n, "mode": mode, "side": name,
                           "steps_per_s": round(sps, 1), "load": [l0, load()],
                           "utc": time.strftime("%H:%M:%S", time.gmtime())}
                    print(json.dumps(rec), flush=True)
                    results.setdefault((backend, n, mode), {}).setdefault(name, []).append(rec)

# Extra columns: (side, heading), each followed by its ratio to AFK.
EXTRA = ([("ours_preload", "ours with the preloaded allocator, steps/s")] if PRELOAD else []) + \
    ([("ours_ct", "ours on one thread (current-thread runtime), steps/s")] if CT else []) + \
    ([("ours_spawn", "ours, runs awaited from a task, steps/s")] if SPAWN else []) + \
    ([("ours_forget", "diagnosis: ours on one thread, store keeping no record, steps/s")] if FORGET else [])
heads = "".join(f" {h} | ÷ AFK |" for _, h in EXTRA)
print("\n| store | steps/run | mode | AFK Python steps/s (median; each rep) | ours steps/s (median; each rep) | ours ÷ AFK |" + heads + " load (1-min) during |")
print("|---|---:|---|---:|---:|---:|" + "---:|---:|" * len(EXTRA) + "---:|")
for (backend, n, mode), sides in results.items():
    a = [r["steps_per_s"] for r in sides["afk"]]
    o = [r["steps_per_s"] for r in sides["ours"]]
    loads = [x for s in sides.values() for r in s for x in r["load"]]
    fmt = lambda xs: f"{statistics.median(xs):,.1f} ({', '.join(f'{x:,.1f}' for x in xs)})"
    cols = ""
    for side, _ in EXTRA:
        p = [r["steps_per_s"] for r in sides.get(side, [])]
        if not p:  # a column this backend does not have (ours_forget on Redis)
            cols += " – | – |"
            continue
        cols += f" {fmt(p)} | {statistics.median(p) / statistics.median(a):.1f}× |"
    print(f"| {backend} | {n} | {mode} | {fmt(a)} | {fmt(o)} | "
          f"{statistics.median(o) / statistics.median(a):.1f}× |{cols} {min(loads):.1f}–{max(loads):.1f} |")
