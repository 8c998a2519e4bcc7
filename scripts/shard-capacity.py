#!/usr/bin/env python3
"""Complete flows/s of k sharded brokers, each shard held to a fixed CPU budget (docs/scaling.md, "Capacity").

For each k it starts k brokers (release build, `--durability batch`, `--shard-name b<i> --brokers LIST`), puts each
broker and, once `askrelay load` has started it, its shard's limits worker into a cgroup of their own with a CPU
quota of --cpus, runs `askrelay load --mode flows --brokers LIST` closed loop, and reads its throughput. The load
generator and the parents are not held: the last column says how much CPU they took per flow, which is what stops
the scaling first on a small machine. Rounds alternate the order of k. Needs root (cgroups). Run it on a quiet
machine.

    sudo python3 scripts/shard-capacity.py --shards 1,2,3,4 --cpus 0.25 --rounds 3
"""

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PERIOD_US = 100_000


class Failure(Exception):
    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


class CPUGroup:
    """A cgroup with a CPU quota (cgroup v2 `cpu.max`, else v1 `cpu.cfs_quota_us`), removed by close()."""

    def __init__(self, name, cpus):
        quota = max(1000, int(cpus * PERIOD_US))
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            parent = "/sys/fs/cgroup/askrelay-capacity"
            os.makedirs(parent, exist_ok=True)
            with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as control:
                control.write("+cpu")
            with open(os.path.join(parent, "cgroup.subtree_control"), "w") as control:
                control.write("+cpu")
            self.path = os.path.join(parent, name)
            os.makedirs(self.path, exist_ok=True)
            with open(os.path.join(self.path, "cpu.max"), "w") as limit:
                limit.write("%d %d" % (quota, PERIOD_US))
        elif os.path.isdir("/sys/fs/cgroup/cpu"):
            self.path = os.path.join("/sys/fs/cgroup/cpu/askrelay-capacity", name)
            os.makedirs(self.path, exist_ok=True)
            with open(os.path.join(self.path, "cpu.cfs_period_us"), "w") as period:
                period.write(str(PERIOD_US))
            with open(os.path.join(self.path, "cpu.cfs_quota_us"), "w") as limit:
                limit.write(str(quota))
        else:
            raise Failure("no cgroup CPU controller under /sys/fs/cgroup: shard CPU budgets need one")
        self.members = set()

    def add(self, pid):
        if pid in self.members:
            return
        with open(os.path.join(self.path, "cgroup.procs"), "w") as procs:
            procs.write(str(pid))
        self.members.add(pid)

    def close(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)  # its last process is still exiting


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def processes(name):
    """(pid, command line) of the running processes whose executable is `name`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as file:
                words = file.read().split(b"\0")
        except OSError:
            continue
        if words and os.path.basename(words[0].decode(errors="replace")) == name:
            found.append((int(entry), " ".join(word.decode(errors="replace") for word in words)))
    return found


def wait_ready(process, what):
    line = process.stdout.readline()
    while line and not line.startswith("ready"):
        line = process.stdout.readline()
    if not line:
        raise Failure("%s exited before its ready line (exit %s)" % (what, process.poll()))


def measure(k, options, scratch):
    """One run of k shards: (flows/s, cpu µs per flow of the processes not held, the load's last lines)."""
    bin_dir = options.bin
    ports = [free_port() for _ in range(k)]
    names = ["b%d" % index for index in range(k)]
    endpoints = ["tcp://127.0.0.1:%d" % port for port in ports]
    shard_list = ",".join("%s=%s" % pair for pair in zip(names, endpoints))
    groups = [CPUGroup("k%d-%s" % (k, name), options.cpus) for name in names]
    brokers = []
    load = None
    stop_watch = threading.Event()
    try:
        for name, endpoint, group in zip(names, endpoints, groups):
            data = tempfile.mkdtemp(prefix="data-%s-" % name, dir=scratch)
            broker = subprocess.Popen(
                [os.path.join(bin_dir, "askrelay-broker"), "--endpoint", endpoint, "--data-dir", data,
                 "--durability", "batch", "--shard-name", name, "--brokers", shard_list],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            group.add(broker.pid)
            brokers.append(broker)
        for name, broker in zip(names, brokers):
            wait_ready(broker, "broker " + name)

        def hold_limits_workers():
            # askrelay load starts one limits worker per shard, on that shard's endpoint.
            while not stop_watch.is_set():
                for pid, command in processes("askrelay-limits"):
                    for endpoint, group in zip(endpoints, groups):
                        if endpoint in command:
                            try:
                                group.add(pid)
                            except OSError:
                                pass
                stop_watch.wait(0.05)

        watcher = threading.Thread(target=hold_limits_workers, daemon=True)
        watcher.start()
        command = [os.path.join(bin_dir, "askrelay"), "load", "--mode", "flows", "--brokers", shard_list,
                   "--endpoints", str(options.children), "--families", str(options.children),
                   "--inflight", str(options.inflight), "--duration", options.duration, "--warmup", options.warmup]
        load = subprocess.run(command, capture_output=True, text=True, env=clean_environment())
        stop_watch.set()
        watcher.join()
        if load.returncode != 0:
            raise Failure("%s exited %d:\n%s" % (" ".join(command), load.returncode, load.stderr[-2000:]))
        held = sum(len(group.members) for group in groups)
        if held < 2 * k:
            raise Failure("only %d of the %d brokers and limits workers could be held to their CPU budget" % (held, 2 * k))
        lines = load.stdout.strip().splitlines()
        throughput = next((float(m.group(1)) for line in reversed(lines)
                           for m in [re.search(r"throughput=([0-9.]+)", line)] if m), None)
        if throughput is None:
            raise Failure("no throughput= in the load's output:\n" + "\n".join(lines[-8:]))
        unheld = 0.0
        for line in lines:
            if line.startswith("cpu µs/flow:"):
                for name, value in re.findall(r"([a-z0-9-]+) ([0-9.]+)", line.split(":", 1)[1]):
                    if name.startswith("load") or name.startswith("parent"):
                        unheld += float(value)
        return throughput, unheld
    finally:
        stop_watch.set()
        for broker in brokers:
            broker.terminate()
        for broker in brokers:
            try:
                broker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                broker.kill()
        for group in groups:
            group.close()


def clean_environment():
    return {key: value for key, value in os.environ.items() if not key.startswith("ASKRELAY_")}


def main():
    parser = argparse.ArgumentParser(description="Complete flows/s of k sharded brokers, each held to --cpus.")
    parser.add_argument("--shards", default="1,2,3,4", help="the k to measure, comma-separated (default: 1,2,3,4)")
    parser.add_argument("--cpus", type=float, default=0.25,
                        help="CPU budget of each shard: its broker and its limits worker together (default: 0.25)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each measures every k (default: 3)")
    parser.add_argument("--duration", default="10s", help="measured window of each run (default: 10s)")
    parser.add_argument("--warmup", default="2s", help="load before the window (default: 2s)")
    parser.add_argument("--children", type=int, default=400, help="children, each of its own family (default: 400)")
    parser.add_argument("--inflight", type=int, default=200, help="flows kept in flight (default: 200)")
    parser.add_argument("--bin", default=os.path.join(ROOT, ".build", "release"),
                        help="the release executables (default: .build/release)")
    options = parser.parse_args()
    try:
        try:
            shards = [int(word) for word in options.shards.split(",")]
        except ValueError:
            raise Failure("--shards %s: give whole numbers, comma-separated (1,2,3,4)" % options.shards, 64)
        if not shards or min(shards) < 1:
            raise Failure("--shards %s: every k must be 1 or more" % options.shards, 64)
        if not 0.01 <= options.cpus <= os.cpu_count():
            raise Failure("--cpus %s: give a budget from 0.01 to %d" % (options.cpus, os.cpu_count()), 64)
        if options.rounds < 1:
            raise Failure("--rounds must be at least 1", 64)
        if os.geteuid() != 0:
            raise Failure("shard CPU budgets are cgroups: run it as root (sudo)", 64)
        if not os.access(os.path.join(options.bin, "askrelay"), os.X_OK):
            raise Failure("no release build at %s: run swift build -c release" % options.bin, 64)
        results = {k: [] for k in shards}
        unheld = {k: [] for k in shards}
        print("shards %s, %.2f CPU each (broker + limits), %d children, %d in flight, %s after %s warm-up, %d round(s)"
              % (options.shards, options.cpus, options.children, options.inflight, options.duration, options.warmup,
                 options.rounds), flush=True)
        scratch = tempfile.mkdtemp(prefix="askrelay-capacity-")
        try:
            for round_number in range(1, options.rounds + 1):
                order = shards if round_number % 2 else list(reversed(shards))
                for k in order:
                    rate, cpu = measure(k, options, scratch)
                    results[k].append(rate)
                    unheld[k].append(cpu)
                    print("round %d: k=%d %.0f flows/s (load and parents %.0f cpu µs/flow)"
                          % (round_number, k, rate, cpu), flush=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        base = statistics.median(results[shards[0]]) / shards[0]
        print("medians of %d round(s):" % options.rounds)
        print("%3s %10s %12s %10s %22s" % ("k", "flows/s", "per shard", "× k=%d" % shards[0], "load+parents µs/flow"))
        for k in shards:
            rate = statistics.median(results[k])
            print("%3d %10.0f %12.0f %10.2f %22.0f"
                  % (k, rate, rate / k, rate / (base * shards[0]), statistics.median(unheld[k])))
        return 0
    except Failure as failure:
        print("shard-capacity: %s" % failure, file=sys.stderr)
        return failure.code


if __name__ == "__main__":
    sys.exit(main())
