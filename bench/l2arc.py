#!/usr/bin/env python3
"""The SSD tier end to end (issue 14): an hdd-7200 pool with and without an nvme cache device.

    bench/l2arc.sh [--working-set 64M] [--warm-seconds 150] [--steady-seconds 20]

(`bench/l2arc.sh` builds cairn in release and runs this.) Everything is on emulated devices in
DIR (default target/bench-l2arc): a 1 GiB `emu:hdd-7200` pool, a 256 MiB volume of 8 KiB blocks,
`cairn serve --arc-max WS/4`, and for the cached configuration a 512 MiB `emu:nvme` cache
device. The first WORKING_SET bytes are written (fio, 1 MiB writes) and synced; then fio's NBD
engine reads them at random, 8 KiB at QD8:

1. cache: warm-up for WARM s, IOPS logged per second: the time to 90% of the steady rate, and the
   steady rate (the last STEADY s); `stat l2arc` gives hits, misses, RAM per cached block, and
   `stat arc` the RAM cache's evictions by the block's state in the SSD tier over a steady run
   of STEADY s: "uncached eligible" (a block the feeding rules take that RAM let go while the
   tier neither held it nor accepted it: the tier is fed as RAM evicts, so that is an offer
   refused by admission or dropped because the writers were behind) as a share of the eligible
   ones (cached + uncached eligible), target <= 5%.
2. no cache: the same pool without a cache device, STEADY s: the disk alone.
3. restart: the cached server is stopped and started again; a 10 s random read run samples
   `stat l2arc` every 0.25 s: the hit ratio in the first second against the steady one.
4. scan: a sequential read of twice the working set beyond it (QD1, 8 KiB), then random reads of
   the working set again: the hit ratio after the scan.

Prints a markdown table with the issue's targets (the script fails only on errors).
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

BLOCK = 8192
FIO_OUTPUT = "/tmp/cairn-bench-l2arc-fio.json"


def log(text):
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def size_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


class Cairn:
    def __init__(self, binary, state):
        self.binary, self.state = binary, state
        self.server = None

    def run(self, *args):
        cmd = [self.binary, "--state-dir", self.state, *args]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr}")
        return done.stdout

    def serve(self, arc_max, log_path):
        out = open(log_path, "a")
        self.server = subprocess.Popen(
            [self.binary, "--state-dir", self.state, "serve", "--arc-max", arc_max],
            stdout=out, stderr=out)
        socket = os.path.join(self.state, "nbd.sock")
        for _ in range(200):
            if os.path.exists(socket):
                return f"nbd+unix:///tank/vol?socket={socket}"
            time.sleep(0.05)
        raise SystemExit("cairn serve did not start")

    def stop(self):
        if self.server:
            self.server.send_signal(signal.SIGTERM)
            self.server.wait(timeout=120)
            self.server = None

    def l2(self):
        fields = {}
        for line in self.run("stat", "l2arc", "-H", "tank").splitlines():
            name, value = line.split("\t")
            fields[name.removeprefix("tank.")] = int(value)
        return fields

    def arc(self):
        fields = {}
        for line in self.run("stat", "arc", "-H", "-p").splitlines():
            name, value = line.split("\t")
            fields[name] = int(value)
        return fields


def fio(uri, name, rw, seconds, size, offset=0, iodepth=8, log_prefix=None):
    args = ["fio", f"--name={name}", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}",
            f"--bs={BLOCK}", f"--iodepth={iodepth}", f"--offset={offset}", f"--size={size}",
            "--norandommap=1", "--randrepeat=0", "--output-format=json",
            f"--output={FIO_OUTPUT}"]
    if seconds:
        args += ["--time_based=1", f"--runtime={seconds}"]
    if log_prefix:
        args += [f"--write_iops_log={log_prefix}", "--log_avg_msec=1000"]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"fio {name} failed:\n{done.stderr}")
    with open(FIO_OUTPUT) as output:
        text = output.read()
    # fio may print notes before its JSON.
    job = json.loads(text[text.index("{"):])["jobs"][0]
    return job["read"]["iops"] if rw.endswith("read") else job["write"]["iops"]


def iops_per_second(prefix):
    path = f"{prefix}_iops.1.log"
    rates = []
    with open(path) as lines:
        for line in lines:
            fields = [field.strip() for field in line.split(",")]
            rates.append(int(fields[1]))
    return rates


def setup(cairn, directory, cache, working_set):
    devs = os.path.join(directory, "devs")
    os.makedirs(devs)
    vdevs = [f"emu:hdd-7200:{devs}/d0.img"]
    if cache:
        vdevs += ["cache", f"emu:nvme:{devs}/c0.img"]
    cairn.run("pool", "create", "--size", "1G", "tank", *vdevs)
    if cache:
        # The cache device was made 1 GiB by --size; it is the tier's to fill.
        pass
    cairn.run("create", "-V", "256M", "-o", "volblocksize=8K", "tank/vol")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cairn", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--working-set", default="64M")
    parser.add_argument("--warm-seconds", type=int, default=150)
    parser.add_argument("--steady-seconds", type=int, default=20)
    args = parser.parse_args()
    ws = size_bytes(args.working_set)
    arc_max = f"{max(ws // 4, 16 << 20) >> 20}M"
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    results = {}

    for config in ("cache", "nocache"):
        directory = os.path.join(args.dir, config)
        os.makedirs(directory)
        cairn = Cairn(args.cairn, os.path.join(directory, "state"))
        setup(cairn, directory, config == "cache", ws)
        uri = cairn.serve(arc_max, os.path.join(directory, "serve.log"))
        try:
            log(f"{config}: writing the working set ({args.working_set})")
            subprocess.run(["fio", "--name=fill", "--ioengine=nbd", f"--uri={uri}", "--rw=write",
                            "--bs=1M", "--iodepth=4", f"--size={ws}", "--output-format=json"],
                           check=True, capture_output=True)
            cairn.run("pool", "sync", "tank")
            if config == "nocache":
                log(f"{config}: random 8K reads, QD8, {args.steady_seconds} s")
                results["nocache_iops"] = fio(uri, "disk", "randread", args.steady_seconds, ws)
                continue
            prefix = os.path.join(directory, "warm")
            log(f"{config}: warming with random 8K reads, QD8, {args.warm_seconds} s")
            fio(uri, "warm", "randread", args.warm_seconds, ws, log_prefix=prefix)
            rates = iops_per_second(prefix)
            steady = sum(rates[-args.steady_seconds:]) / max(1, len(rates[-args.steady_seconds:]))
            warm_at = next((second + 1 for second, rate in enumerate(rates)
                            if rate >= 0.9 * steady), None)
            before, arc_before = cairn.l2(), cairn.arc()
            log(f"{config}: steady random reads, {args.steady_seconds} s")
            results["cache_iops"] = fio(uri, "steady", "randread", args.steady_seconds, ws)
            after, arc_after = cairn.l2(), cairn.arc()
            evicted = {state: arc_after[f"evict_l2_{state}"] - arc_before[f"evict_l2_{state}"]
                       for state in ("cached", "eligible", "ineligible")}
            results["evicted"] = evicted
            results["uncached_eligible"] = (evicted["eligible"]
                                            / max(1, evicted["cached"] + evicted["eligible"]))
            results["warm_evicted"] = {state: arc_before[f"evict_l2_{state}"]
                                       for state in ("cached", "eligible", "ineligible")}
            hits = after["hits"] - before["hits"]
            misses = after["misses"] - before["misses"]
            results["steady_hit_ratio"] = hits / max(1, hits + misses)
            results["warm_seconds"] = warm_at
            results["ram_per_block"] = after["index_ram_bytes"] / max(1, after["indexed_blocks"])
            # Everything included: the tier's share of the RAM tier's admission sketch too
            # (sized for the device's capacity, not for what it holds).
            results["ram_per_block_all"] = ((after["index_ram_bytes"]
                                             + after.get("sketch_ram_bytes", 0))
                                            / max(1, after["indexed_blocks"]))
            results["indexed_blocks"] = after["indexed_blocks"]
            cairn.stop()

            log("cache: restart; hit ratio in the first second of reads")
            uri = cairn.serve(arc_max, os.path.join(directory, "serve.log"))
            base = cairn.l2()
            reader = subprocess.Popen(
                ["fio", "--name=restart", "--ioengine=nbd", f"--uri={uri}", "--rw=randread",
                 f"--bs={BLOCK}", "--iodepth=8", f"--size={ws}", "--time_based=1",
                 "--runtime=10", "--norandommap=1", "--randrepeat=0"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            started = time.monotonic()
            samples = []
            while reader.poll() is None:
                time.sleep(0.25)
                now = cairn.l2()
                samples.append((time.monotonic() - started, now["hits"] - base["hits"],
                                now["misses"] - base["misses"]))
            first = [sample for sample in samples if sample[0] <= 1.25]
            if first:
                _, hits, misses = first[-1]
                results["restart_first_second_hit_ratio"] = hits / max(1, hits + misses)
            results["restart_rebuild_blocks"] = cairn.l2()["rebuild_blocks"]

            log("cache: a sequential scan of twice the working set, then the working set again")
            fio(uri, "scan", "read", 0, 2 * ws, offset=ws, iodepth=1)
            before = cairn.l2()
            fio(uri, "after-scan", "randread", 10, ws)
            after = cairn.l2()
            hits = after["hits"] - before["hits"]
            misses = after["misses"] - before["misses"]
            results["after_scan_hit_ratio"] = hits / max(1, hits + misses)
        finally:
            cairn.stop()

    ratio = results["cache_iops"] / max(1.0, results["nocache_iops"])
    restart = results.get("restart_first_second_hit_ratio", 0.0)
    steady_ratio = results["steady_hit_ratio"]
    print()
    print("| measure | value | target | result |")
    print("|---|---:|---|---|")
    print(f"| 8K random read IOPS, QD8, hdd-7200 pool + nvme cache | {results['cache_iops']:,.0f} | | |")
    print(f"| the same pool without a cache device | {results['nocache_iops']:,.0f} | | |")
    print(f"| ratio | {ratio:.1f}x | >= 10x | {'met' if ratio >= 10 else 'NOT met'} |")
    print(f"| time to 90% of the steady rate | {results['warm_seconds']} s | reported | |")
    print(f"| steady L2 hit ratio | {steady_ratio:.3f} | | |")
    evicted, uncached = results["evicted"], results["uncached_eligible"]
    mib = lambda value: f"{value / (1 << 20):,.1f} MiB"
    print(f"| RAM evictions once warm: \"uncached eligible\" / (cached + uncached eligible) "
          f"({mib(evicted['eligible'])} of {mib(evicted['cached'] + evicted['eligible'])}; "
          f"{mib(evicted['ineligible'])} ineligible) | {100 * uncached:.2f}% | <= 5% | "
          f"{'met' if uncached <= 0.05 else 'NOT met'} |")
    print(f"| L2 hit ratio in the first second after a restart | {restart:.3f} | >= 0.9 x steady "
          f"({0.9 * steady_ratio:.3f}) | {'met' if restart >= 0.9 * steady_ratio else 'NOT met'} |")
    print(f"| RAM per cached block, index ({results['indexed_blocks']:,} blocks) | "
          f"{results['ram_per_block']:.1f} B | <= 16 B | "
          f"{'met' if results['ram_per_block'] <= 16 else 'NOT met'} |")
    print(f"| RAM per cached block, everything included (index + the admission sketch's share, "
          f"grown with the blocks the tier holds) | {results['ram_per_block_all']:.1f} B | <= 16 B | "
          f"{'met' if results['ram_per_block_all'] <= 16 else 'NOT met'} |")
    print(f"| L2 hit ratio after a scan of 2x the working set | "
          f"{results['after_scan_hit_ratio']:.3f} | hot set kept | "
          f"{'met' if results['after_scan_hit_ratio'] >= 0.9 * steady_ratio else 'NOT met'} |")
    print()
    print(f"Working set {args.working_set} of 8 KiB blocks, arc_max {arc_max}; emulated hdd-7200 "
          f"pool (1 GiB), emulated nvme cache device (1 GiB); fio nbd engine, one connection.")
    warm = results["warm_evicted"]
    print(f"During warm-up RAM evicted {mib(warm['cached'])} already on the cache device, "
          f"{mib(warm['eligible'])} uncached eligible, {mib(warm['ineligible'])} ineligible.")
    load = os.getloadavg()
    print(f"Load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"({os.cpu_count()} CPUs).")


if __name__ == "__main__":
    main()
