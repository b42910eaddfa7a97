#!/usr/bin/env python3
"""Throughput of one eosflow instance against `processor.threads`, with its CPU per thread.

For each thread count it runs `eosflow bench` (count shape, exactly-once, one instance over
`--partitions` partitions) with EOSFLOW_PROCESSOR_THREADS set, and meanwhile samples
/proc/<pid>/task/*/stat of the instance every 0.2 s. It prints one table: records/s (the
bench's own figure, median over its rounds) and the CPU microseconds each kind of thread used
per record processed (eos-loop-N: the processing loops; rdk:*: librdkafka's broker and main
threads; rocksdb:*: compaction and flush; other), summed over the bench's rounds. The scaling
of the loops can then be judged against the cores the machine has, which `os.cpu_count()`
prints. The CPU covers the instance's whole life in each round (start, the drain, the bench's
latency phase), so it is a profile of where the work goes, not of the drain alone.

    python3 benches/threads-profile.py --exe target/release/eosflow --threads 1,2,4 \
        --partitions 4 --records 400000 --out target/bench-threads
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict

TICK = os.sysconf("SC_CLK_TCK")


def instance_pids(out_dir):
    """Pids of `eosflow run` processes whose state directory is under this run's `out_dir`
    (others may run benchmarks or tests on the same machine)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            if b"run" not in cmd or not any(c.endswith(b"eosflow") for c in cmd[:1]):
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            if f"EOSFLOW_STATE_DIR={out_dir}".encode() in env:
                out.append(pid)
        except OSError:
            continue
    return out


def thread_times(pid):
    """{tid: (name, cpu ticks)} of one process."""
    times = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return times
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        times[tid] = (name, int(fields[11]) + int(fields[12]))
    return times


def kind(name):
    if name.startswith("eos-loop"):
        return name
    if name.startswith("rdk:broker"):
        return "rdk:broker*"
    if name.startswith("rdk:"):
        return "rdk:main/other"
    if name.startswith("rocksdb") or name.startswith("rocksdb:"):
        return "rocksdb"
    return "other"


def run(args, threads):
    out = os.path.abspath(os.path.join(args.out, f"t{threads}"))
    env = dict(os.environ, EOSFLOW_PROCESSOR_THREADS=str(threads))
    cmd = [
        args.exe, "bench", "--shapes", "count", "--partitions", str(args.partitions),
        "--instances", "1", "--repeats", str(args.repeats), "--contenders", "eosflow-eos",
        "--records", str(args.records), "--recovery-keys", "0", "--out", out,
        "--repo", args.repo,
    ]
    bench = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = {}  # (pid, tid) -> (name, first ticks, last ticks)
    first_seen = None
    deadline = time.time() + args.timeout
    while bench.poll() is None:
        if time.time() > deadline:
            bench.kill()
            raise SystemExit(f"threads={threads}: bench did not finish within {args.timeout} s")
        for pid in instance_pids(out):
            for tid, (name, ticks) in thread_times(pid).items():
                key = (pid, tid)
                if key not in seen:
                    seen[key] = (name, ticks, ticks)
                    first_seen = first_seen or time.time()
                else:
                    n, t0, _ = seen[key]
                    seen[key] = (n, t0, ticks)
        time.sleep(0.2)
    err = bench.stderr.read()
    if bench.returncode != 0:
        raise SystemExit(f"threads={threads}: bench failed:\n{err[-2000:]}")
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    rates = [s["records_per_sec"] for s in results["samples"] if s["point"]["contender"] == "eosflow-eos"]
    handled = max(args.records * args.repeats, 1)
    cpu = defaultdict(float)
    for (_, _), (name, t0, t1) in seen.items():
        cpu[kind(name)] += (t1 - t0) / TICK
    # CPU microseconds per record processed.
    return statistics.median(rates) if rates else float("nan"), {k: v * 1e6 / handled for k, v in cpu.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exe", default="target/release/eosflow")
    p.add_argument("--threads", default="1,2,4")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--records", type=int, default=400000)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default="target/bench-threads")
    p.add_argument("--repo", default=".")
    p.add_argument("--timeout", type=int, default=900)
    args = p.parse_args()
    print(f"cores: {os.cpu_count()}; load before: {os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    for n in [int(x) for x in args.threads.split(",")]:
        rate, cpu = run(args, n)
        rows.append((n, rate, cpu))
        loops = sum(v for k, v in cpu.items() if k.startswith("eos-loop"))
        print(f"threads={n} records/s={rate:.0f} cpu_us_per_record: loops={loops:.2f} "
              + " ".join(f"{k}={v:.2f}" for k, v in sorted(cpu.items())), flush=True)
    base = rows[0][1]
    print("\nCPU in microseconds per record:\n")
    print("| threads | records/s | × 1 thread | loops | per loop | librdkafka | RocksDB | other |")
    print("|---:|---:|---:|---:|---|---:|---:|---:|")
    for n, rate, cpu in rows:
        loops = {k: v for k, v in cpu.items() if k.startswith("eos-loop")}
        per = ", ".join(f"{v:.2f}" for _, v in sorted(loops.items()))
        rdk = cpu.get("rdk:broker*", 0) + cpu.get("rdk:main/other", 0)
        print(f"| {n} | {rate:,.0f} | {rate / base:.2f} | {sum(loops.values()):.2f} | {per} | {rdk:.2f} | {cpu.get('rocksdb', 0):.2f} | {cpu.get('other', 0):.2f} |")
    print(f"\nload after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    sys.exit(main())
