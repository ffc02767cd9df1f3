"""dir-lookups.py DIR: lookups of random names in one directory at 1,000, 100,000 and 1,000,000
entries, through whatever file system DIR is on (bench/dir-lookups.sh runs it on each).

DIR is grown to each size with empty files. At each size the kernel's dentry and inode caches
are dropped, an untimed warm-up looks up 5,000 missing names (so the file system's threads are
awake: 1,000 timed lookups alone end before they are), then stat() of up to 20,000 distinct
random existing names is timed one by one: each is a cold lookup (one FUSE LOOKUP on a FUSE
mount). Prints one line per size: entries, creates per second since the previous size, mean
and p99 lookup time in microseconds. Needs root (drop_caches).
"""

import os
import random
import sys
import time

SIZES = (1_000, 100_000, 1_000_000)
TIMED_LOOKUPS_MAX = 20_000
WARMUP_LOOKUPS = 5_000


def drop_dentries_and_inodes():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")


def name_of(directory, index):
    return os.path.join(directory, f"f{index:07d}")


def main():
    directory = sys.argv[1]
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(7)
    count = 0
    for size in SIZES:
        started = time.time()
        grown_from = count
        while count < size:
            os.close(os.open(name_of(directory, count), os.O_CREAT | os.O_WRONLY, 0o644))
            count += 1
        creates_per_s = (count - grown_from) / (time.time() - started)
        drop_dentries_and_inodes()
        for i in range(WARMUP_LOOKUPS):
            try:
                os.stat(os.path.join(directory, f"missing{count}-{i}"))
            except FileNotFoundError:
                pass
        latencies_ns = []
        for index in rng.sample(range(count), min(count, TIMED_LOOKUPS_MAX)):
            path = name_of(directory, index)
            before = time.perf_counter_ns()
            os.stat(path)
            latencies_ns.append(time.perf_counter_ns() - before)
        latencies_ns.sort()
        mean_us = sum(latencies_ns) / len(latencies_ns) / 1000
        p99_us = latencies_ns[int(len(latencies_ns) * 0.99)] / 1000
        print(
            f"{count} entries: creates {creates_per_s:.0f}/s, "
            f"lookup mean {mean_us:.1f} us p99 {p99_us:.1f} us",
            flush=True,
        )


if __name__ == "__main__":
    main()
