#!/usr/bin/env bash
# Runs a command with a bound on its wall time, for make test's `swift test` (docs/contributing.md, "When a test
# run hangs"): a test that never ends would otherwise hold CI until its own limit, with nothing said about where.
# Past the bound, every thread of the test binary and the project's processes it started is backtraced with gdb, the
# processes are listed, the whole process group is killed, and the exit status is 124.
#
# usage: Tests/watchdog.sh SECONDS COMMAND [ARG...]
set -uo pipefail

if [[ $# -lt 2 || ! "$1" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 SECONDS COMMAND [ARG...]  (SECONDS: a whole number above 0, the command's wall-time bound)" >&2
    exit 64
fi
limit=$1
shift

# The command gets a process group of its own, so that what it started is found and ended with it; its output is
# line-buffered, so that a hang's last lines are printed before the hang rather than lost in a pipe's buffer.
set -m
stdbuf -oL -eL "$@" &
pid=$!
set +m

deadline=$((SECONDS + limit))
while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
    sleep 1 # allowed: the watchdog's own poll of the command, which has no signal to wait for
done

if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"
    exit $?
fi

echo "watchdog: '$*' still runs after ${limit} s; its processes, each thread's backtrace, then it is killed" >&2
ps -o pid,ppid,stat,etime,args -p "$(pgrep -d, -g "$pid")" >&2 || true
for process in $(pgrep -g "$pid"); do
    # Only the test binaries and the project's executables are worth a backtrace; swift-test itself only waits.
    case "$(ps -o comm= -p "$process" 2>/dev/null)" in
    AskRelay* | *.xctest | askrelay*) ;;
    *) continue ;;
    esac
    echo "watchdog: backtraces of pid $process: $(ps -o args= -p "$process" 2>/dev/null)" >&2
    if command -v gdb >/dev/null; then
        # gdb (make test-deps installs it) rather than the toolchain's lldb, which needs a libpython Debian 12 lacks.
        timeout 120 gdb -p "$process" -batch -ex "thread apply all bt" 2>&1 | grep -E "^(Thread |#[0-9])" |
            swift demangle --simplified | cut -c1-220 >&2 || true
    else
        echo "watchdog: no gdb on PATH (make test-deps installs it), no backtraces" >&2
    fi
done
kill -TERM -- "-$pid" 2>/dev/null
for _ in 1 2 3 4 5; do
    pgrep -g "$pid" >/dev/null || break
    sleep 1 # allowed: up to 5 s of grace between SIGTERM and SIGKILL of a hung group
done
kill -KILL -- "-$pid" 2>/dev/null
wait "$pid" 2>/dev/null
echo "watchdog: '$*' was killed after ${limit} s; the backtraces above show where it hung" >&2
exit 124
