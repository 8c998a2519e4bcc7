#!/usr/bin/env bash
# make deploy-test: the compose deployment (compose/docker-compose.yml) under a real Docker engine, and the
# Kubernetes manifests (deploy/kubernetes) under `podman kube play`, driven from the host.
#
# Phases (each prints its duration): packages, binaries, engine, base image, runtime image, compose up, host flows
# + broker kill -9 and restart, records check, a real Prometheus scraping every container, SIGTERM drain, the sharded
# compose file rebalanced 2 -> 3 -> 2 brokers under load with its records check, podman kube play, cleanup.
# It starts its own dockerd (own data root, exec root and socket; stopped at the end) and uses podman with its own
# storage and containers.conf, so it never touches another engine on the machine. Everything it creates
# (containers, networks, volumes, pods, its dockerd, temp files) is removed at the end, also on failure or timeout.
# Kept between runs, under $ASKRELAY_DEPLOY_CACHE (default .build/deploy-test): the debootstrap base image (a tar,
# keyed by its inputs) and the engines' image stores, so a re-run skips debootstrap and apt.
#
# Environment: ASKRELAY_DEPLOY_TIMEOUT (seconds, default 1500) bounds the whole run; ASKRELAY_DEPLOY_KEEP_LOGS=DIR
# copies every container's log there (podman's too, as podman-NAME.log); ASKRELAY_DEPLOY_SKIP_COMPOSE=1 / ASKRELAY_DEPLOY_SKIP_KUBE=1 leave out the
# compose or the podman phases, ASKRELAY_DEPLOY_SKIP_SHARDED=1 the sharded compose phases (to work on one of them).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${ASKRELAY_DEPLOY_CACHE:-$REPO/.build/deploy-test}"
TIMEOUT="${ASKRELAY_DEPLOY_TIMEOUT:-1500}"
PRODUCTS=(askrelay askrelay-broker askrelay-limits askrelay-parent askrelay-child)
BIN="$REPO/.build/deploy/release"
PROJECT=askrelaydeploy
IMAGE=askrelay-deploy:test
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

# One run at a time per cache (the engines' stores are shared between runs).
mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock -n 9 || { echo "another deploy test is running on $CACHE (flock $CACHE/lock)" >&2; exit 75; }
RUN="$(mktemp -d /tmp/askrelay-deploy.XXXXXX)"
SOCKET="$RUN/docker.sock"
export DOCKER_HOST="unix://$SOCKET"
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0
DOCKER=/usr/bin/docker
COMPOSE=(/usr/bin/docker-compose -p "$PROJECT" -f "$REPO/compose/docker-compose.yml")
SHARDED=(/usr/bin/docker-compose -p "${PROJECT}sharded" -f "$REPO/compose/docker-compose.sharded.yml")
DOCKERD_PID=""
HOST_CHILD_PID=""
PODMAN_READY=""
# podman with its own storage and configuration (the machine's defaults fail on rlimits and cgroups here).
# Its run root and temp folder keep one path per cache (podman's database records them), removed at the end.
PODMAN_RUN="/tmp/askrelay-deploy-podman-$(printf %s "$CACHE" | sha256sum | cut -c1-8)"
pm() {
    CONTAINERS_CONF="$RUN/containers.conf" podman --root "$CACHE/podman" --runroot "$PODMAN_RUN/run" \
        --tmpdir "$PODMAN_RUN/tmp" "$@" 9>&-
}
START=$(date +%s.%N)
PHASE=""
PHASE_START=$START

say() { printf '%s\n' "$*"; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
phase() {
    [ -n "$PHASE" ] && say "== $PHASE: done in $(elapsed "$PHASE_START") s"
    PHASE="$1"
    PHASE_START=$(date +%s.%N)
    say "== $PHASE"
}
fail() {
    say "FAIL ($PHASE): $*" >&2
    exit 1
}
# wait_for DESCRIPTION SECONDS COMMAND...: polls COMMAND every 0.5 s until it succeeds or the deadline passes.
wait_for() {
    local what="$1" seconds="$2"
    shift 2
    local deadline=$(($(date +%s) + seconds))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "$what: not within ${seconds}s"
        sleep 0.5
    done
}

# Host-side commands run without the ASKRELAY_* variables exported for compose (a worker reads its flags from them:
# ASKRELAY_FAMILIES would make the host child claim children its key does not list).
unset_askrelay() { compgen -e | grep '^ASKRELAY_' | sed 's/^/-u /'; }
host() { env $(unset_askrelay) "$@"; }

# ---- cleanup: always, in reverse order of creation -----------------------------------------------------------------
cleanup() {
    local status=$1
    trap - EXIT INT TERM
    kill "$WATCHDOG" 2>/dev/null
    set +e
    say "== cleanup"
    [ -n "$HOST_CHILD_PID" ] && kill "$HOST_CHILD_PID" 2>/dev/null && wait "$HOST_CHILD_PID" 2>/dev/null
    [ -n "${PROMETHEUS_PID:-}" ] && kill "$PROMETHEUS_PID" 2>/dev/null && wait "$PROMETHEUS_PID" 2>/dev/null
    if [ $status -ne 0 ] && [ -f "$RUN/host-child.err" ]; then
        say "--- host child stdout, stderr (last 20 lines)"
        tail -n 20 "$RUN/host-child.out" "$RUN/host-child.err"
    fi
    if [ $status -ne 0 ] && [ -S "$SOCKET" ]; then
        for c in $($DOCKER ps -aq 2>/dev/null); do
            say "--- log of $($DOCKER inspect -f '{{.Name}}' "$c") (last 30 lines)"
            $DOCKER logs --tail 30 "$c" 2>&1
        done
    fi
    if [ -n "${ASKRELAY_DEPLOY_KEEP_LOGS:-}" ] && [ -S "$SOCKET" ]; then
        mkdir -p "$ASKRELAY_DEPLOY_KEEP_LOGS"
        for c in $($DOCKER ps -aq 2>/dev/null); do
            $DOCKER logs "$c" >"$ASKRELAY_DEPLOY_KEEP_LOGS/$($DOCKER inspect -f '{{.Name}}' "$c" | tr -d /).log" 2>&1
        done
    fi
    if [ -S "$SOCKET" ]; then
        timeout 60 "${COMPOSE[@]}" down -v --remove-orphans -t 5 >/dev/null 2>&1
        timeout 60 "${SHARDED[@]}" down -v --remove-orphans -t 5 >/dev/null 2>&1
        ids=$($DOCKER ps -aq)
        [ -n "$ids" ] && $DOCKER rm -f $ids >/dev/null 2>&1
        $DOCKER volume prune -f >/dev/null 2>&1
        $DOCKER network prune -f >/dev/null 2>&1
    fi
    if [ -n "$DOCKERD_PID" ]; then
        kill -TERM "$DOCKERD_PID" 2>/dev/null
        for _ in $(seq 1 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$DOCKERD_PID" 2>/dev/null
    fi
    if [ -n "${PODMAN_READY:-}" ]; then
        if [ $status -ne 0 ]; then
            for c in $(pm ps -a --format '{{.Names}}' | grep -v -- '-infra$'); do
                say "--- podman log of $c (last 20 lines)"
                pm logs --tail 20 "$c" 2>&1
            done
        fi
        if [ -n "${ASKRELAY_DEPLOY_KEEP_LOGS:-}" ]; then
            mkdir -p "$ASKRELAY_DEPLOY_KEEP_LOGS"
            for c in $(pm ps -a --format '{{.Names}}' | grep -v -- '-infra$'); do
                pm logs "$c" >"$ASKRELAY_DEPLOY_KEEP_LOGS/podman-$c.log" 2>&1
            done
        fi
        pm pod rm -af -t 5 >/dev/null 2>&1
        pm volume rm -af >/dev/null 2>&1
        pm secret rm askrelay-keys >/dev/null 2>&1
        pm network rm -f askrelay-kube >/dev/null 2>&1
        rm -rf "$PODMAN_RUN"
    fi
    # Mounts an engine may have left under the run folder (none when it stopped cleanly).
    grep -o " $RUN[^ ]*" /proc/mounts 2>/dev/null | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
    rm -rf "$RUN"
    say "== total: $(elapsed "$START") s, $([ $status -eq 0 ] && echo PASSED || echo "FAILED (exit $status)")"
    exit $status
}
WATCHDOG=""
trap 'cleanup $?' EXIT
trap 'fail "interrupted"' INT TERM
# The whole run is bounded: a watchdog sends TERM to this script (cleanup still runs) at the deadline.
# Background processes get the lock's fd 9 closed, so none of them can hold the lock after the run.
(
    trap 'kill $sleeper 2>/dev/null; exit 0' TERM
    sleep "$TIMEOUT" 9>&- &
    sleeper=$!
    wait $sleeper && say "FAIL: the deploy test passed its ${TIMEOUT}s bound" >&2 && kill -TERM $$
) 9>&- 2>/dev/null &
WATCHDOG=$!

# ---- packages ------------------------------------------------------------------------------------------------------
phase "packages (docker.io, docker-compose, debootstrap, podman, prometheus when missing)"
missing=""
for p in docker.io docker-compose debootstrap podman catatonit runc python3-yaml prometheus; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    say "installing:$missing"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
[ "$(id -u)" = 0 ] || fail "run as root (dockerd, debootstrap and podman's rootful storage need it)"

# ---- binaries ------------------------------------------------------------------------------------------------------
phase "binaries (swift build -c release --static-swift-stdlib, into .build/deploy)"
for p in "${PRODUCTS[@]}"; do
    (cd "$REPO" && ${SWIFT:-swift} build -c release --static-swift-stdlib --scratch-path .build/deploy --product "$p" \
        >"$RUN/build-$p.log" 2>&1) || { grep -E "error" "$RUN/build-$p.log" | head -20; fail "swift build $p"; }
    say "  $p: $(tail -1 "$RUN/build-$p.log")"
done
for p in "${PRODUCTS[@]}"; do [ -x "$BIN/$p" ] || fail "$BIN/$p was not built"; done

# ---- engine --------------------------------------------------------------------------------------------------------
phase "engine (dockerd of our own: data root $CACHE/docker, socket $SOCKET)"
mkdir -p "$CACHE/docker"
dockerd --data-root "$CACHE/docker" --exec-root "$RUN/exec" -H "$DOCKER_HOST" --pidfile "$RUN/docker.pid" \
    --default-ulimit nofile=20000:20000 --bridge=none >"$RUN/dockerd.log" 2>&1 9>&- &
DOCKERD_PID=$!
wait_for "dockerd answers on $SOCKET" 60 $DOCKER info
# Leftovers of a run that was killed before its cleanup (the image store is kept; nothing else is).
old=$($DOCKER ps -aq)
[ -n "$old" ] && $DOCKER rm -f $old >/dev/null
$DOCKER volume prune -f >/dev/null
$DOCKER network prune -f >/dev/null

# ---- base image ----------------------------------------------------------------------------------------------------
# The machine's Debian mirror, read from its apt sources (never written into the repository).
mirror() {
    local m=""
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        m=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
    fi
    if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
        m=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) { print $i; exit } }' \
            /etc/apt/sources.list)
    fi
    printf '%s' "${m:-http://deb.debian.org/debian}"
}
MIRROR="$(mirror)"
BASE_KEY=$(printf 'debootstrap --variant=minbase bookworm %s %s v1' "$MIRROR" "$(dpkg --print-architecture)" |
    sha256sum | cut -c1-12)
BASE_IMAGE="askrelay-deploy-base:$BASE_KEY"
BASE_TAR="$CACHE/base-$BASE_KEY.tar"
phase "base image ($BASE_IMAGE: debootstrap minbase bookworm from $MIRROR, cached)"
if [ ! -f "$BASE_TAR" ]; then
    rootfs="$RUN/rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$RUN/debootstrap.log" 2>&1 ||
        { tail -20 "$RUN/debootstrap.log"; fail "debootstrap"; }
    tar -C "$rootfs" -cf "$BASE_TAR.partial" . && mv "$BASE_TAR.partial" "$BASE_TAR"
    rm -rf "$rootfs"
    say "debootstrap done; cached as $BASE_TAR"
else
    say "cached: $BASE_TAR"
fi
$DOCKER image inspect "$BASE_IMAGE" >/dev/null 2>&1 || $DOCKER import - "$BASE_IMAGE" <"$BASE_TAR" >/dev/null

# ---- runtime image -------------------------------------------------------------------------------------------------
phase "runtime image ($IMAGE from compose/Dockerfile.prebuilt, classic builder)"
mkdir -p "$RUN/context/bin"
for p in "${PRODUCTS[@]}"; do cp "$BIN/$p" "$RUN/context/bin/"; done
$DOCKER build -q --network host -f "$REPO/compose/Dockerfile.prebuilt" --build-arg BASE_IMAGE="$BASE_IMAGE" \
    -t "$IMAGE" "$RUN/context" >/dev/null || fail "docker build"
notfound=$($DOCKER run --rm --network none --entrypoint sh "$IMAGE" -c \
    'for f in /usr/local/bin/askrelay*; do ldd "$f"; done' | grep "not found" || true)
[ -z "$notfound" ] || fail "libraries missing in the image: $notfound"
say "ldd: every executable's libraries are in the image"

# check_records FILE N: a children's JSONL records file holds N flows, each finished (approved, denied, cancelled,
# known-handle: none expired or lost), and no question's response surfaced twice.
check_records() {
    python3 - "$1" "$2" <<'EOF'
import collections, json, sys
path, expected = sys.argv[1], int(sys.argv[2])
records = [json.loads(line) for line in open(path) if line.strip()]
outcomes = collections.Counter(r["outcome"] for r in records)
allowed = {"approved", "denied", "cancelled", "known-handle"}
bad = [r for r in records if r["outcome"] not in allowed]
questions = collections.Counter(r["question"] for r in records if r.get("question"))
twice = [q for q, n in questions.items() if n > 1]
print(f"  {path.rsplit('/', 1)[-1]}: {len(records)} flows {dict(outcomes)}")
problems = []
if len(records) != expected:
    problems.append(f"{len(records)} records, expected {expected}")
if bad:
    problems.append(f"{len(bad)} flows ended {sorted({r['outcome'] for r in bad})}: {bad[:3]}")
if twice:
    problems.append(f"a response surfaced twice: {twice[:3]}")
if problems:
    print("  " + "; ".join(problems), file=sys.stderr)
    sys.exit(1)
EOF
}

if [ "${ASKRELAY_DEPLOY_SKIP_COMPOSE:-0}" != 1 ]; then
# ---- compose up ----------------------------------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export ASKRELAY_IMAGE="$IMAGE"
export ASKRELAY_BROKER_PORT="$(free_port)" ASKRELAY_STATS_PORT="$(free_port)" ASKRELAY_METRICS_PORT="$(free_port)"
# Keys for 2 parent replicas and 3 child "hosts": two child containers and the host-side child (child-3.key).
export ASKRELAY_PARENT_REPLICAS=2 ASKRELAY_CHILD_REPLICAS=3
export ASKRELAY_FAMILIES=6 ASKRELAY_GUARDIANS_PER_FAMILY=2 ASKRELAY_CHILDREN_PER_FAMILY=1
export ASKRELAY_POLICY=approve ASKRELAY_PARENT_THINK=fixed:20ms
export ASKRELAY_FLOWS=40 ASKRELAY_CHILD_THINK=1s ASKRELAY_CANCEL_PROBABILITY=0.1
export ASKRELAY_LOG_LEVEL=info ASKRELAY_HEARTBEAT=1s
STATS="tcp://127.0.0.1:$ASKRELAY_STATS_PORT"
METRICS="http://127.0.0.1:$ASKRELAY_METRICS_PORT/metrics"
HOST_METRICS_PORT="$(free_port)"
# metric URL NAME[{LABELS}]...: for each NAME, the sum of its samples (with exactly those labels, when given), all
# from one fetch of a /metrics page (so they are from the same publication), separated by spaces.
metric() {
    python3 - "$@" <<'PY'
import sys, urllib.request
url, names = sys.argv[1], sys.argv[2:]
lines = [line for line in urllib.request.urlopen(url, timeout=5).read().decode().splitlines()
         if line.strip() and not line.startswith("#")]
values = []
for wanted in names:
    total, found = 0.0, False
    for line in lines:
        series, value = line.rsplit(" ", 1)
        if series == wanted or ("{" not in wanted and series.split("{")[0] == wanted):
            total, found = total + float(value), True
    if not found:
        sys.exit(f"{url} has no {wanted}")
    values.append(str(int(total) if total == int(total) else total))
print(" ".join(values))
PY
}
phase "compose up (broker with CURVE, limits, --scale parent=2 --scale child=2; ports $ASKRELAY_BROKER_PORT, \
$ASKRELAY_STATS_PORT on 127.0.0.1)"
timeout 120 "${COMPOSE[@]}" up -d --no-build --scale parent=2 --scale child=2 >"$RUN/compose-up.log" 2>&1 ||
    { cat "$RUN/compose-up.log"; fail "docker-compose up"; }
broker=$("${COMPOSE[@]}" ps -q broker)
health() { $DOCKER inspect -f '{{.State.Health.Status}}' "$broker"; }
wait_for "the broker's health check (askrelay top)" 90 sh -c "[ \"\$($DOCKER inspect -f '{{.State.Health.Status}}' \
$broker)\" = healthy ]"
say "broker healthy"
logs_have() { "${COMPOSE[@]}" logs --no-color "$1" 2>/dev/null | grep -c -- "$2" || true; }
all_ready() { [ "$(logs_have limits 'ready id=')" -ge 1 ] && [ "$(logs_have parent 'ready guardians=')" -ge 2 ] &&
    [ "$(logs_have child 'ready children=')" -ge 2 ]; }
wait_for "limits, 2 parents, 2 children print their ready line" 60 all_ready
say "workers ready: $("${COMPOSE[@]}" ps --services | tr '\n' ' ')"

# ---- host flows, kill -9, restart ----------------------------------------------------------------------------------
phase "host flows through 127.0.0.1:$ASKRELAY_BROKER_PORT with CURVE; kill -9 the broker mid-run; restart"
mkdir -p "$RUN/keys"
$DOCKER cp "$broker:/etc/askrelay/keys/child-3.key" "$RUN/keys/" >/dev/null
$DOCKER cp "$broker:/etc/askrelay/keys/broker.public" "$RUN/keys/" >/dev/null
snapshot() { host "$BIN/askrelay" top --stats-endpoint "$STATS" --json --count 1 --timeout 5s; }
snapshot >/dev/null || fail "no stats snapshot from the host through $STATS (published port)"
say "stats from the host through $STATS: ok"
# Issue 17 section 4: the broker's /metrics, scraped from the host through the published port, moves with the flows.
# The loop publishes its counters every 250 ms at most (BrokerMetrics.publishInterval, at a housekeeping pass), and a
# scrape reads the last publication: two scrapes less than that apart may read the same one. So the baseline is taken
# before the host child starts, and the check waits (bounded) for a page above it.
ASKS='askrelay_broker_messages_routed_total{kind="ask"}'
baseline=$(metric "$METRICS" "$ASKS" askrelay_broker_deliveries_total) || fail "scrape $METRICS"
read -r routed_a delivered_a <<<"$baseline"
# A question the broker acknowledged and then lost would end as `expired` after 60 s (--expire-after): the check
# below allows none.
# A simple command, not the function: $! must be the child itself (env execs it), so SIGTERM reaches it.
env $(unset_askrelay) "$BIN/askrelay-child" --broker "tcp://127.0.0.1:$ASKRELAY_BROKER_PORT" \
    --curve-key "$RUN/keys/child-3.key" --broker-key "$RUN/keys/broker.public" --flows 30 --think 200ms \
    --contacts 40 --known-ratio 0 --expire-after 60s --seed 7 --records "$RUN/host-child.jsonl" \
    --metrics-endpoint "127.0.0.1:$HOST_METRICS_PORT" --stay --log-level notice \
    >"$RUN/host-child.out" 2>"$RUN/host-child.err" 9>&- &
HOST_CHILD_PID=$!
wait_for "the host child's ready line" 30 grep -q "ready children=" "$RUN/host-child.out"
say "host child: $(grep "ready children=" "$RUN/host-child.out")"
wait_for "5 finished host flows before the kill" 60 sh -c "[ \$(wc -l <'$RUN/host-child.jsonl') -ge 5 ]"
# Sets routed_b, delivered_b and sessions from one page; true once both counters are above the baseline.
counters_moved() {
    local page
    page=$(metric "$METRICS" "$ASKS" askrelay_broker_deliveries_total askrelay_broker_sessions) || return 1
    read -r routed_b delivered_b sessions <<<"$page"
    [ "$routed_b" -gt "$routed_a" ] && [ "$delivered_b" -gt "$delivered_a" ]
}
wait_for "the broker's /metrics: asks routed above $routed_a and deliveries above $delivered_a (its counters did not \
move)" 10 counters_moved
# The gauge is as old as its page, too: the host child's session may be on a later one.
sessions_up() { sessions=$(metric "$METRICS" askrelay_broker_sessions) && [ "$sessions" -ge 6 ]; }
[ "$sessions" -ge 6 ] || wait_for "askrelay_broker_sessions reaches 6 (limits, 2 parents, 3 children)" 10 sessions_up
say "metrics from the host ($METRICS): asks routed $routed_a -> $routed_b, deliveries $delivered_a -> $delivered_b, \
sessions $sessions"
before=$(snapshot) || fail "no stats snapshot from the host"
restarts=$($DOCKER inspect -f '{{.RestartCount}}' "$broker")
pid=$($DOCKER inspect -f '{{.State.Pid}}' "$broker")
say "kill -9 broker pid $pid (host view) after $(wc -l <"$RUN/host-child.jsonl") host flows; delivered so far: \
$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["delivered"])' "$before")"
kill -9 "$pid"
killed_at=$(date +%s.%N)
restarted() { [ "$($DOCKER inspect -f '{{.RestartCount}}' "$broker")" -gt "$restarts" ] &&
    [ "$($DOCKER inspect -f '{{.State.Running}}' "$broker")" = true ]; }
wait_for "Docker restarts the killed broker (restart: unless-stopped)" 30 restarted
wait_for "the restarted broker is healthy" 90 sh -c "[ \"\$($DOCKER inspect -f '{{.State.Health.Status}}' $broker)\" \
= healthy ]"
say "broker restarted by Docker (exit 137 -> RestartCount $($DOCKER inspect -f '{{.RestartCount}}' "$broker")) and \
healthy $(elapsed "$killed_at") s after the kill"
HOST_METRICS="http://127.0.0.1:$HOST_METRICS_PORT/metrics"
# --stay: the host child keeps running after its flows, so its own /metrics can be read, then drains on SIGTERM.
wait_for "the host child finishes its 2 x 30 flows" 150 grep -q "done flows=" "$RUN/host-child.out"
grep -q "done flows=60" "$RUN/host-child.out" || fail "host child (2 children x 30 flows): $(cat "$RUN/host-child.out")"
say "host child: $(grep "done flows=" "$RUN/host-child.out")"
registrations=$(metric "$HOST_METRICS" askrelay_worker_registrations_total) || fail "scrape $HOST_METRICS"
retries=$(metric "$HOST_METRICS" askrelay_worker_send_retries_total) || fail "scrape $HOST_METRICS"
acknowledged=$(metric "$HOST_METRICS" askrelay_worker_sends_acknowledged_total) || fail "scrape $HOST_METRICS"
say "host child's /metrics: registrations $registrations, SENDs acknowledged $acknowledged, SEND retries $retries"
[ "$registrations" -ge 2 ] || fail "the host child registered $registrations time(s); the kill should add one"
kill -TERM "$HOST_CHILD_PID"
wait "$HOST_CHILD_PID" || fail "the host child exited $? on SIGTERM: $(tail -5 "$RUN/host-child.err")"
HOST_CHILD_PID=""
grep -q "signal received, stopping" "$RUN/host-child.err" || fail "the host child did not log its drain"
say "host child: SIGTERM -> exit 0"
children_done() { [ "$(logs_have child 'done flows=')" -ge 2 ]; }
wait_for "both child containers finish their flows" 150 children_done

# ---- records check -------------------------------------------------------------------------------------------------
phase "records: every flow finished, none expired or lost, no response twice"
$DOCKER run --rm --network none -v askrelay-records:/r:ro --entrypoint sh "$IMAGE" -c 'cat /r/child-*.jsonl' \
    >"$RUN/container-children.jsonl"
# The host child hosts 2 children (families 3 and 6) x 30 flows; each child container 2 children x 40 flows.
check_records "$RUN/host-child.jsonl" 60 || fail "host child records"
check_records "$RUN/container-children.jsonl" 160 || fail "container children records"
after=$(snapshot) || fail "no stats snapshot after the restart"
python3 - "$after" <<'EOF' || fail "broker state after the run"
import json, sys
s = json.loads(sys.argv[1])
print(f"  broker after restart: delivered={s['delivered']} redelivered={s['redelivered']} queued={s['queued']} "
      f"inflight={s['inflight']} ledger={s['ledger']} sessions={s['sessions']}")
if s["delivered"] <= 0:
    sys.exit("the restarted broker delivered nothing")
EOF

# ---- a real Prometheus -----------------------------------------------------------------------------------------------
phase "a real Prometheus (Debian's) scrapes every container, evaluates the shipped rules, counts the children's flows"
mkdir -p "$RUN/prometheus"
cp "$REPO/deploy/prometheus/askrelay-rules.yml" "$RUN/prometheus/"
# Each container's metrics endpoint on the compose network (port 9464 inside; only the broker's is published): the
# host reaches the containers' addresses on Docker's bridge. One job per process kind, named as the rules expect.
ip_of() { $DOCKER inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1"; }
targets() { for c in $("${COMPOSE[@]}" ps -q "$1"); do printf '"%s:9464",' "$(ip_of "$c")"; done | sed 's/,$//'; }
{
    printf 'global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [askrelay-rules.yml]\nscrape_configs:\n'
    for kind in broker limits parent child; do
        printf '  - {job_name: askrelay-%s, static_configs: [{targets: [%s]}]}\n' "$kind" "$(targets "$kind")"
    done
} >"$RUN/prometheus/prometheus.yml"
promtool check config "$RUN/prometheus/prometheus.yml" >"$RUN/prometheus/check.log" 2>&1 ||
    { cat "$RUN/prometheus/check.log"; fail "promtool check config"; }
PROMETHEUS_PORT="$(free_port)"
prometheus --config.file="$RUN/prometheus/prometheus.yml" --storage.tsdb.path="$RUN/prometheus/data" \
    --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" >"$RUN/prometheus/prometheus.log" 2>&1 9>&- &
PROMETHEUS_PID=$!
# prom QUERY-CHECK: one Python check against the server's HTTP API (exit 0 when it holds, printing what it saw).
prom() {
    python3 - "http://127.0.0.1:$PROMETHEUS_PORT" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
base, check = sys.argv[1], sys.argv[2]
def get(path):
    return json.load(urllib.request.urlopen(base + path, timeout=5))["data"]
if check == "targets":
    active = get("/api/v1/targets")["activeTargets"]
    bad = [(t["labels"]["job"], t["scrapeUrl"], t["health"], t["lastError"]) for t in active
           if t["health"] != "up" or t["lastError"]]
    print(f"{len(active)} targets, not up: {bad}")
    sys.exit(0 if len(active) == 6 and not bad else 1)
if check == "rules":
    groups = get("/api/v1/rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    print(f"{len(rules)} rules in {len(groups)} groups, not ok: {bad}")
    sys.exit(0 if rules and not bad else 1)
query, expected = check.split("==")
result = get("/api/v1/query?" + urllib.parse.urlencode({"query": query}))["result"]
value = float(result[0]["value"][1]) if result else None
print(f"{query} = {value}")
sys.exit(0 if value == float(expected) else 1)
PY
}
wait_for "Prometheus: all 6 targets (broker, limits, 2 parents, 2 children) up, no scrape error" 60 prom targets
say "  $(prom targets)"
wait_for "Prometheus: every shipped rule evaluated without error" 30 prom rules
say "  $(prom rules)"
# The two child containers' finished flows, counted by Prometheus, against their records (160, checked above).
flows=$(wc -l <"$RUN/container-children.jsonl")
wait_for "Prometheus: sum(askrelay_child_flows_total) == $flows" 30 prom "sum(askrelay_child_flows_total)==$flows"
say "  $(prom "sum(askrelay_child_flows_total)==$flows") (the children's records: $flows flows)"
kill -TERM "$PROMETHEUS_PID"
wait "$PROMETHEUS_PID" || true
PROMETHEUS_PID=""

# ---- SIGTERM drain -------------------------------------------------------------------------------------------------
phase "SIGTERM: docker-compose stop; every process drains and exits 0"
timeout 120 "${COMPOSE[@]}" stop >"$RUN/compose-stop.log" 2>&1 || { cat "$RUN/compose-stop.log"; fail "stop"; }
failed=0
for c in $("${COMPOSE[@]}" ps -q); do
    name=$($DOCKER inspect -f '{{.Name}}' "$c" | tr -d /)
    code=$($DOCKER inspect -f '{{.State.ExitCode}}' "$c")
    log=$($DOCKER logs "$c" 2>&1)
    case "$name" in
        *_keys_*) drained="keys generated (one-shot)" ;;
        *_broker_*) drained=$(grep -o "broker stopped" <<<"$log" | tail -1) ;;
        *) drained=$(grep -o "signal received, stopping" <<<"$log" | tail -1) ;;
    esac
    say "  $name: exit $code; ${drained:-NO DRAIN LINE}"
    { [ "$code" = 0 ] && [ -n "$drained" ]; } || failed=1
done
[ $failed = 0 ] || fail "a process did not drain (exit code or log above)"
grep -q "signal received, draining" <<<"$($DOCKER logs "$broker" 2>&1)" || fail "the broker did not log its drain"
fi

# ---- sharded compose: rebalance 2 -> 3 -> 2 brokers under load ------------------------------------------------------
if [ "${ASKRELAY_DEPLOY_SKIP_SHARDED:-0}" != 1 ]; then
    . "$REPO/Tests/Deploy/compose-sharded.sh"
fi

# ---- podman kube play ----------------------------------------------------------------------------------------------
if [ "${ASKRELAY_DEPLOY_SKIP_KUBE:-0}" != 1 ]; then
    . "$REPO/Tests/Deploy/kube-play.sh"
fi

phase "done"
