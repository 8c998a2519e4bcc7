#!/usr/bin/env python3
"""Thread wake-ups per flow, per process, at a fixed rate (docs/performance.md, "What bounds each figure").

Runs `askrelay load --mode flows --rate R` with the executables in BIN, and inside its measured window reads the
voluntary and involuntary context switches of every thread of the load process and of the broker, limits worker and
parent it starts (/proc/<pid>/task/*/status) twice, WINDOW seconds apart. Prints one line: each process's switches
divided by the flows started in between (rate x window), and their total:

    python3 scripts/wakeups-per-flow.py --bin .build/release --rate 1100
    broker=13.4 limits=5.5 load=9.1 parent=3.8 total=31.9

Run it on a quiet machine, alternating two builds' BIN folders to compare them. Exit 64 for bad usage, 1 when the
load run fails.
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import time


def switches(pid):
    """Every thread's voluntary and involuntary context switches so far (threads that ended are not counted)."""
    total = 0
    for status in glob.glob("/proc/%d/task/*/status" % pid):
        try:
            text = open(status).read()
        except OSError:
            continue
        total += sum(int(value) for value in re.findall(r"(?:non)?voluntary_ctxt_switches:\s+(\d+)", text))
    return total


def command_name(pid):
    try:
        return os.path.basename(open("/proc/%d/cmdline" % pid).read().split("\0")[0])
    except OSError:
        return ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, help="folder of askrelay and the server executables (a release build)")
    parser.add_argument("--rate", type=float, default=1100, help="flows started per second (default 1100)")
    parser.add_argument("--window", type=float, default=4, help="seconds between the two samples (default 4)")
    arguments = parser.parse_args()
    askrelay = os.path.join(arguments.bin, "askrelay")
    if not os.access(askrelay, os.X_OK):
        print("wakeups-per-flow: no executable %s: build it (swift build -c release) or give --bin" % askrelay,
              file=sys.stderr)
        return 64
    if arguments.rate <= 0 or arguments.window <= 0:
        print("wakeups-per-flow: --rate and --window must be positive", file=sys.stderr)
        return 64
    warmup = 2.0
    duration = arguments.window + 3
    load = subprocess.Popen([askrelay, "load", "--mode", "flows", "--rate", "%g" % arguments.rate,
                             "--duration", "%gs" % duration, "--warmup", "%gs" % warmup],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # The processes start, then the warm-up; sample inside the measured window.
    time.sleep(warmup + 1.5)
    found = subprocess.run(["pgrep", "-P", str(load.pid)], capture_output=True, text=True).stdout.split()
    processes = {load.pid: "load"}
    for pid in map(int, found):
        name = command_name(pid)
        if name.startswith("askrelay-"):
            processes[pid] = name[len("askrelay-"):]
    first = {pid: switches(pid) for pid in processes}
    started = time.time()
    time.sleep(arguments.window)
    second = {pid: switches(pid) for pid in processes}
    elapsed = time.time() - started
    output, _ = load.communicate()
    if load.returncode != 0:
        print("wakeups-per-flow: the load run failed (exit %d):\n%s" % (load.returncode, output), file=sys.stderr)
        return 1
    flows = arguments.rate * elapsed
    per_flow = {}
    for pid, name in processes.items():
        per_flow[name] = per_flow.get(name, 0) + (second[pid] - first[pid]) / flows
    print(" ".join("%s=%.1f" % (name, value) for name, value in sorted(per_flow.items())),
          "total=%.1f" % sum(per_flow.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
