#!/usr/bin/env python3
"""Compare this checkout's release build with another revision's, figure by figure (docs/performance.md).

Builds BASE (a git revision) into its own folder, then runs the performance figures of docs/performance.md with
both builds, alternating which goes first in each round, and prints every round, each figure's medians and the
ratio this checkout / BASE. Run it on a quiet machine: no build, test or benchmark beside it.

    python3 scripts/bench-compare.py --base 090b819 --rounds 5        (make bench-compare BASE=090b819)
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, what is measured, askrelay arguments, how the figure is read from the output, which way is better.
FIGURES = [
    ("relay/proxy", "relay ÷ zmq_proxy throughput, 100 B, 100 in flight",
     ["load", "--mode", "relay", "--baseline", "proxy", "--inflight", "100", "--size", "100"], "ratio", "higher"),
    ("relay/proxy batch", "the same with --durability batch",
     ["load", "--mode", "relay", "--baseline", "proxy", "--inflight", "100", "--size", "100",
      "--durability", "batch"], "ratio", "higher"),
    ("flows/s", "complete flows/s, closed loop, --durability batch",
     ["load", "--mode", "flows", "--durability", "batch"], "throughput", "higher"),
    ("p99 µs @1600", "end-to-end p99 at 1 600 flows/s",
     ["load", "--mode", "flows", "--rate", "1600"], "p99", "lower"),
    ("cpu µs/flow @1600", "CPU per flow over every process at 1 600 flows/s",
     ["load", "--mode", "flows", "--rate", "1600"], "cpu", "lower"),
]


class Failure(Exception):
    """What stopped the comparison; `code` is the exit code: 64 for bad usage, 1 for a run or build that failed."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


def read_figure(how, output):
    """The figure `how` from a load run's output, or raise Failure naming what was missing."""
    lines = output.strip().splitlines()
    if how in ("ratio", "throughput"):
        for line in reversed(lines):
            match = re.search(r"(?:^|\s)" + how + r"=([0-9.]+)", line)
            if match:
                return float(match.group(1))
    elif how == "p99":
        header = next((line.split() for line in lines if line.split()[:1] == ["stage"]), None)
        row = next((line.split() for line in lines if line.strip().startswith("end-to-end")), None)
        if header and row and "p99" in header:
            # The header is "stage count p50 µs p90 µs p99 µs ...": a value column per "<name> µs" pair.
            names = [word for word in header[1:] if word != "µs"]
            return float(row[1 + names.index("p99")])
    elif how == "cpu":
        for line in lines:
            match = re.search(r"cpu µs/flow: .*\(total ([0-9.]+)\)", line)
            if match:
                return float(match.group(1))
    raise Failure("no %s in the output; its last lines:\n%s" % (how, "\n".join(lines[-8:])))


def run(binary, arguments, duration, warmup):
    command = [binary] + arguments + ["--duration", duration, "--warmup", warmup]
    result = subprocess.run(command, capture_output=True, text=True, env=clean_environment())
    if result.returncode != 0:
        raise Failure("%s exited %d:\n%s" % (" ".join(command), result.returncode, result.stderr[-2000:]))
    return result.stdout


def clean_environment():
    # A caller's ASKRELAY_* settings would change one build's run and not the other's meaning.
    return {key: value for key, value in os.environ.items() if not key.startswith("ASKRELAY_")}


def build_base(revision, folder):
    """The release build of `revision` in `folder` (a detached worktree, kept for the next comparison)."""
    sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", revision + "^{commit}"],
                         capture_output=True, text=True)
    if sha.returncode != 0:
        raise Failure("--base %s is not a revision of this repository (git rev-parse: %s)"
                      % (revision, sha.stderr.strip()), 64)
    sha = sha.stdout.strip()
    tree = os.path.join(folder, sha[:12])
    if not os.path.isdir(tree):
        os.makedirs(folder, exist_ok=True)
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", tree, sha], check=True,
                       stdout=subprocess.DEVNULL)
    print("building %s (%s) into %s" % (revision, sha[:12], tree), flush=True)
    subprocess.run(["swift", "build", "-c", "release"], cwd=tree, check=True)
    return os.path.join(tree, ".build", "release")


def main():
    parser = argparse.ArgumentParser(
        description="Compare this checkout's release build with BASE's over docs/performance.md's figures.")
    parser.add_argument("--base", help="the git revision to compare with (built into .build/bench-compare/)")
    parser.add_argument("--base-bin", help="a folder with BASE's release executables already built (skips the build)")
    parser.add_argument("--head-bin", default=os.path.join(ROOT, ".build", "release"),
                        help="this checkout's release executables (default: .build/release; make bench-compare builds it)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each running both builds (default: 5)")
    parser.add_argument("--duration", default="5s", help="measured window of each run (default: 5s)")
    parser.add_argument("--warmup", default="2s", help="load before the window, not counted (default: 2s)")
    parser.add_argument("--figures", default=",".join(name for name, *_ in FIGURES),
                        help="the figures to measure, by name, comma-separated (default: all)")
    options = parser.parse_args()
    try:
        if options.rounds < 1:
            raise Failure("--rounds must be at least 1", 64)
        wanted = [name.strip() for name in options.figures.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in [figure[0] for figure in FIGURES]]
        if unknown:
            raise Failure("unknown figure(s) %s; the figures are: %s"
                          % (", ".join(unknown), ", ".join(figure[0] for figure in FIGURES)), 64)
        if bool(options.base) == bool(options.base_bin):
            raise Failure("give --base REVISION (it is built) or --base-bin FOLDER (already built), one of them", 64)
        base_bin = options.base_bin or build_base(options.base, os.path.join(ROOT, ".build", "bench-compare"))
        builds = {"base": os.path.join(base_bin, "askrelay"), "head": os.path.join(options.head_bin, "askrelay")}
        for name, binary in builds.items():
            if not os.access(binary, os.X_OK):
                raise Failure("no %s build at %s: build it with swift build -c release" % (name, binary), 64)
        figures = [figure for figure in FIGURES if figure[0] in wanted]
        values = {(figure[0], build): [] for figure in figures for build in builds}
        print("comparing head (%s) with base (%s): %d round(s), %s each after %s warm-up"
              % (options.head_bin, base_bin, options.rounds, options.duration, options.warmup), flush=True)
        started = time.monotonic()
        for round_number in range(1, options.rounds + 1):
            # Alternate which build goes first, so a drift of the machine does not favour one.
            order = ["base", "head"] if round_number % 2 else ["head", "base"]
            outputs = {}
            for name, _, arguments, how, _ in figures:
                for build in order:
                    key = (tuple(arguments), build)
                    if key not in outputs:
                        outputs[key] = run(builds[build], arguments, options.duration, options.warmup)
                    values[(name, build)].append(read_figure(how, outputs[key]))
                print("round %d: %-18s base %10.3f  head %10.3f"
                      % (round_number, name, values[(name, "base")][-1], values[(name, "head")][-1]), flush=True)
        print("medians of %d round(s), %.0f s in all:" % (options.rounds, time.monotonic() - started))
        print("%-18s %12s %12s %8s  %s" % ("figure", "base", "head", "head/base", "better"))
        for name, description, _, _, better in figures:
            base = statistics.median(values[(name, "base")])
            head = statistics.median(values[(name, "head")])
            ratio = head / base if base else float("nan")
            print("%-18s %12.3f %12.3f %8.3f  %s (%s)" % (name, base, head, ratio, better, description))
        return 0
    except Failure as failure:
        print("bench-compare: %s" % failure, file=sys.stderr)
        return failure.code
    except subprocess.CalledProcessError as error:
        print("bench-compare: %s failed with exit %d" % (" ".join(error.cmd), error.returncode), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
