#!/usr/bin/python3
"""Helpers of bench/snapshots.sh (issue 34): the timed snapshot loop and the report.

  snapshots.py create --system S --out DIR --n N --list-at K --snap 'CMD {i}' --list 'CMD'
                      --noop 'CMD' --target URI_OR_PATH --size BYTES
      N times: a 4 KiB write of random bytes at a random 4 KiB-aligned offset of the volume
      (through NBD with libnbd when the target is an nbd URI, else pwrite on the file), then the
      snapshot command, timed from spawn to exit. After snapshot K and after snapshot N the list
      command runs three times, timed. Before the loop the no-op command runs 20 times: what
      spawning the tool and one round trip to its daemon cost on its own.
  snapshots.py report --dir DIR --systems S,S,...
      Reads DIR/results and prints the markdown tables.

Runs with Debian's python3 (/usr/bin/python3), which has python3-libnbd's `nbd` module.
"""
import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import time


def timed(cmd):
    """Seconds CMD took (spawn to exit) and the number of lines it printed; fails loudly."""
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    took = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{shlex.join(cmd)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return took, done.stdout.count(b"\n")


def writer(target):
    """A function writing bytes at an offset of the volume under test."""
    if target.startswith("nbd"):
        import nbd

        handle = nbd.NBD()
        handle.connect_uri(target)
        return lambda offset, data: handle.pwrite(data, offset)
    fd = os.open(target, os.O_WRONLY)
    return lambda offset, data: os.pwrite(fd, data, offset)


def create(args):
    write = writer(args.target)
    rng = random.Random(34)
    noop = [timed(shlex.split(args.noop))[0] for _ in range(20)]
    lists = {}
    with open(os.path.join(args.out, f"{args.system}.create.txt"), "w") as out:
        began = time.time()
        for i in range(1, args.n + 1):
            write(rng.randrange(args.size // 4096) * 4096, os.urandom(4096))
            took, _ = timed([part.replace("{i}", str(i)) for part in shlex.split(args.snap)])
            out.write(f"{took:.6f}\n")
            if i in (args.list_at, args.n):
                runs = [timed(shlex.split(args.list)) for _ in range(3)]
                lists[i] = {"seconds": [t for t, _ in runs], "lines": runs[0][1]}
            if i % 1000 == 0:
                print(f"  {args.system}: {i} snapshots, {time.time() - began:.0f} s",
                      file=sys.stderr, flush=True)
    with open(os.path.join(args.out, f"{args.system}.list.json"), "w") as f:
        json.dump({"noop": noop, "lists": lists}, f)


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def read_env(path):
    env = {}
    if os.path.exists(path):
        for line in open(path):
            key, _, value = line.strip().partition("=")
            env[key] = value
    return env


def iops_windows(path, env):
    """fio's per-second IOPS before the destroy (after a 3 s ramp) and during it."""
    samples = []
    for line in open(path):
        fields = [x.strip() for x in line.split(",")]
        samples.append((int(fields[0]) / 1000, float(fields[1])))
    start, end = float(env["destroy_start"]), float(env["destroy_end"])
    fio_start = float(env["fio_start"])
    # A sample at time t covers the second before t.
    # fio logs no line for a second in which no write completed: those count as 0 IOPS.
    filled = []
    for t, v in samples:
        while filled and t - filled[-1][0] > 1.5:
            filled.append((filled[-1][0] + 1, 0.0))
        filled.append((t, v))
    samples = filled

    def window(lo, hi):
        return [v for t, v in samples if lo <= t - 1 and t <= hi]

    before = window(fio_start + 3, start)
    during = window(start, end + 1)
    if not during:  # a destroy shorter than a second: the sample that holds it
        during = [v for t, v in samples if t > start][:1]
    return before, during


def txg_rows(path):
    """Every txg seen in the sampled `pool txgs -H -p` output: id -> (trigger, dirty, sync us,
    reserved us, background us, commands us); the last three 0 from a server without them."""
    rows = {}
    if os.path.exists(path):
        for line in open(path):
            f = line.strip("\n").split("\t")
            if len(f) >= 7 and f[0].strip().isdigit():
                split = tuple(int(x) for x in f[10:13]) if len(f) >= 13 else (0, 0, 0)
                rows[int(f[0])] = (f[1], int(f[2]), int(f[6])) + split
    return rows


def samples(path):
    """(time, freeing, alloc) triples of the cairn sampler."""
    out = []
    if os.path.exists(path):
        for line in open(path):
            f = line.split()
            if len(f) == 3 and f[1].isdigit() and f[2].isdigit():
                out.append((float(f[0]), int(f[1]), int(f[2])))
    return out


def ms(x):
    return f"{x * 1000:,.1f}"


def report(args):
    res = os.path.join(args.dir, "results")
    systems = [s for s in args.systems.split(",") if os.path.exists(os.path.join(res, f"{s}.create.txt"))]
    peers = [s for s in systems if s != "cairn"]
    if not systems:  # --diff-only
        cairn_details(res, None)
        return
    create, lists, destroy = {}, {}, {}
    for s in systems:
        create[s] = [float(x) for x in open(os.path.join(res, f"{s}.create.txt"))]
        lists[s] = json.load(open(os.path.join(res, f"{s}.list.json")))
        env = read_env(os.path.join(res, f"{s}.destroy.env"))
        iops = os.path.join(res, f"{s}_iops.1.log")
        if env.get("destroy_end") and os.path.exists(iops):
            before, during = iops_windows(iops, env)
            destroy[s] = dict(env=env, before=before, during=during)

    def ratio_cells(values, lower_is_better=True):
        cells = []
        for p in peers:
            a, b = values.get("cairn"), values.get(p)
            if lower_is_better is None or a is None or b is None or a == 0 or b == 0:
                cells.append("–")
            else:
                cells.append(f"**{(b / a if lower_is_better else a / b):.2f}×**")
        return cells

    head = "| measure | " + " | ".join(
        systems + [f"cairn vs {p} (× faster)" for p in peers]) + " |"
    print(head)
    print("|---|" + "---:|" * (len(systems) + len(peers)))

    def row(label, values, fmt, lower_is_better=True):
        cells = [("–" if values.get(s) is None else fmt(values[s])) for s in systems]
        print(f"| {label} | " + " | ".join(cells + ratio_cells(values, lower_is_better)) + " |")

    n = {s: len(create[s]) for s in systems}
    row("snapshot create p50 (ms)", {s: percentile(create[s], 50) for s in systems}, ms)
    row("snapshot create p99 (ms)", {s: percentile(create[s], 99) for s in systems}, ms)
    row("snapshot create max (ms)", {s: max(create[s]) for s in systems}, ms)
    common = min(n.values())
    if len(set(n.values())) > 1:  # the same count for all: the first `common` of each
        row(f"create p50, first {common:,} only (ms)",
            {s: percentile(create[s][:common], 50) for s in systems}, ms)
        row(f"create p99, first {common:,} only (ms)",
            {s: percentile(create[s][:common], 99) for s in systems}, ms)
    row("CLI floor: a no-op command, median (ms)",
        {s: statistics.median(lists[s]["noop"]) for s in systems}, ms)
    for at in sorted({int(k) for s in systems for k in lists[s]["lists"]}):
        vals = {s: min(lists[s]["lists"][str(at)]["seconds"]) for s in systems
                if str(at) in lists[s]["lists"]}
        row(f"list snapshots at {at:,} (ms, best of 3)", vals, ms)
    if destroy:
        def mean(v):
            return statistics.mean(v) if v else None
        row("fio 8K randwrite IOPS before destroy", {s: mean(d["before"]) for s, d in destroy.items()},
            lambda x: f"{x:,.0f}", lower_is_better=False)
        row("fio IOPS during destroy", {s: mean(d["during"]) for s, d in destroy.items()},
            lambda x: f"{x:,.0f}", lower_is_better=False)
        keep = {s: mean(d["during"]) / mean(d["before"]) for s, d in destroy.items()
                if d["during"] and d["before"]}
        row("during / before (target ≥ 0.80)", keep, lambda x: f"{x:.2f}", lower_is_better=False)
        row("lowest 1 s of fio during destroy / mean before",
            {s: min(d["during"]) / mean(d["before"]) for s, d in destroy.items()
             if d["during"] and d["before"]}, lambda x: f"{x:.2f}", lower_is_better=False)
        row("seconds of fio during destroy under 10 % of before (stalls)",
            {s: sum(1 for v in d["during"] if v < 0.1 * mean(d["before"]))
             for s, d in destroy.items() if d["during"] and d["before"]},
            lambda x: f"{x:,}", lower_is_better=None)
        row("destroy command (s)",
            {s: float(d["env"]["destroy_cmd_end"]) - float(d["env"]["destroy_start"])
             for s, d in destroy.items()}, lambda x: f"{x:,.2f}")
        row("destroy until space is free (s)",
            {s: float(d["env"]["destroy_end"]) - float(d["env"]["destroy_start"])
             for s, d in destroy.items()}, lambda x: f"{x:,.2f}")
        freed, grew = {}, {}
        for s, d in destroy.items():
            e = d["env"]
            took = float(e["destroy_end"]) - float(e["destroy_start"])
            if e.get("used_before") and e.get("used_after") and took > 0:
                delta = int(e["used_before"]) - int(e["used_after"])
                # fio keeps writing: a system whose space grew meanwhile has no rate to show.
                if delta > 2**20:
                    freed[s] = delta / took
                else:
                    grew[s] = delta
        row("space used before → after (MiB)",
            {s: (int(d["env"]["used_before"]), int(d["env"]["used_after"]))
             for s, d in destroy.items() if d["env"].get("used_after")},
            lambda x: f"{x[0] / 2**20:,.0f} → {x[1] / 2**20:,.0f}", lower_is_better=None)
        row("space freed / time to free it (MiB/s)", freed, lambda x: f"{x / 2**20:,.1f}",
            lower_is_better=False)
        for s, bytes_ in grew.items():
            print(f"\n{s}: space used changed by {-bytes_ / 2**20:+,.1f} MiB over the destroy "
                  "(fio's writes meanwhile took what was freed): no rate.")
    print()
    print("Snapshots per system: " + ", ".join(f"{s} {n[s]:,}" for s in systems)
          + ". List lines printed at each point: " + "; ".join(
              f"{s} " + ", ".join(f"{v['lines']:,}" for v in lists[s]["lists"].values())
              for s in systems) + ".")

    by_thousand(create)
    if "cairn" in systems:
        cairn_details(res, destroy.get("cairn"))


def by_thousand(create):
    """Create latency p50 / p99 (ms) of each run of 1,000 snapshots: how it grows with count."""
    step = 1000 if max(len(v) for v in create.values()) >= 2000 else 10
    systems = list(create)
    print(f"\n| create p50 / p99 (ms) of snapshots … | " + " | ".join(systems) + " |")
    print("|---|" + "---:|" * len(systems))
    for lo in range(0, max(len(v) for v in create.values()), step):
        cells = []
        for s in systems:
            part = create[s][lo:lo + step]
            cells.append(f"{ms(percentile(part, 50))} / {ms(percentile(part, 99))}" if part else "–")
        print(f"| {lo + 1:,}–{lo + step:,} | " + " | ".join(cells) + " |")


def cairn_details(res, destroy):
    env = read_env(os.path.join(res, "cairn.create.env"))
    if env.get("txg_before") and env.get("txg_after") and os.path.exists(
            os.path.join(res, "cairn.create.txt")):
        a, b = int(env["txg_before"]), int(env["txg_after"])
        count = len(open(os.path.join(res, "cairn.create.txt")).readlines())
        print(f"\ncairn txgs synced over the create loop: {b - a:,} for {count:,} snapshots "
              f"({(b - a) / count:.2f} per snapshot; txg {a} to {b}).")
    if destroy:
        e = destroy["env"]
        rows = txg_rows(os.path.join(res, "cairn.txgs"))
        before_txg, after_txg = int(e["txg_destroy_start"]), int(e["txg_destroy_end"])
        during = {t: r for t, r in rows.items() if before_txg < t <= after_txg}
        earlier = {t: r for t, r in rows.items() if t <= before_txg}
        missing = (after_txg - before_txg) - len(during)
        if during:
            worst = max(during.items(), key=lambda kv: kv[1][2])
            print(f"cairn txgs during the destroy: {len(during):,} seen of {after_txg - before_txg:,} "
                  f"(txg {before_txg + 1}–{after_txg}; {missing} not caught by the sampler); longest "
                  f"sync {worst[1][2] / 1000:,.1f} ms (txg {worst[0]}, {worst[1][0]}, dirty "
                  f"{worst[1][1] / 2**20:,.1f} MiB; {worst[1][3] / 1000:,.1f} ms reserved, "
                  f"{worst[1][5] / 1000:,.1f} ms of commands, {worst[1][4] / 1000:,.1f} ms of "
                  f"background frees, the rest data), median "
                  f"{statistics.median(r[2] for r in during.values()) / 1000:,.1f} ms; sync target 500 ms.")
            cmd = max(during.items(), key=lambda kv: kv[1][5])
            if cmd[1][5]:
                print(f"cairn the destroy's txg (most commands' time): txg {cmd[0]}, {cmd[1][0]}, "
                      f"sync {cmd[1][2] / 1000:,.1f} ms = {cmd[1][5] / 1000:,.1f} ms of commands + "
                      f"{(cmd[1][2] - cmd[1][5]) / 1000:,.1f} ms for {cmd[1][1] / 2**20:,.1f} MiB "
                      f"of data and the rest; {cmd[1][3] / 1000:,.1f} ms was reserved.")
        if earlier:
            print(f"cairn txgs under fio alone before the destroy: longest sync "
                  f"{max(r[2] for r in earlier.values()) / 1000:,.1f} ms, median "
                  f"{statistics.median(r[2] for r in earlier.values()) / 1000:,.1f} ms "
                  f"({len(earlier)} txgs).")
        pts = samples(os.path.join(res, "cairn.samples"))
        start, cmd_end = float(e["destroy_start"]), float(e["destroy_cmd_end"])
        peak = max((f for t, f, _ in pts if t >= start), default=0)
        zero = [t for t, f, _ in pts if t > cmd_end and f == 0]
        first = [t for t, f, _ in pts if t >= cmd_end and f > 0]
        if peak and zero and first:
            took = zero[0] - start
            print(f"cairn background free: `pool get freeing` peaked at {peak / 2**20:,.1f} MiB, "
                  f"back to 0 {took:,.2f} s after the destroy began: {peak / 2**20 / took:,.1f} MiB/s "
                  f"by `freeing` (sampled every ~0.25 s).")
        elif peak == 0:
            print("cairn background free: `pool get freeing` never showed a non-zero value "
                  "(the frees finished between samples).")
    diff = os.path.join(res, "cairn.diff.txt")
    if os.path.exists(diff):
        print("\n| cairn diff --blocks | cache | seconds | ranges | bytes reported |")
        print("|---|---|---:|---:|---:|")
        for line in open(diff):
            label, cache, secs, ranges, total = line.split()
            print(f"| {label} | {cache} | {float(secs):.3f} | {int(ranges):,} | {int(float(total)):,} |")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create")
    for name in ("system", "out", "snap", "list", "noop", "target"):
        c.add_argument(f"--{name}", required=True)
    c.add_argument("--n", type=int, required=True)
    c.add_argument("--list-at", type=int, required=True)
    c.add_argument("--size", type=int, required=True)
    r = sub.add_parser("report")
    r.add_argument("--dir", required=True)
    r.add_argument("--systems", required=True)
    args = parser.parse_args()
    create(args) if args.command == "create" else report(args)


if __name__ == "__main__":
    main()
