# Sourced by Tests/Deploy/deploy-test.sh: deploy/kubernetes under `podman kube play` (podman 4.3), after the
# compose phases. Uses that script's helpers (phase, fail, wait_for, host, pm) and variables (RUN, BIN, IMAGE, REPO).
# What podman 4.3 cannot play (StatefulSet, Service) is rewritten by Tests/Deploy/kube-play.py; see there.

phase "podman kube play (deploy/kubernetes: the broker StatefulSet as its pods, limits, parents and children as \
Deployments)"
cat >"$RUN/containers.conf" <<'EOF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
mkdir -p "$PODMAN_RUN/tmp"
PODMAN_READY=1
# Leftovers of a run killed before its cleanup (the image store is kept; nothing else is).
pm pod rm -af -t 5 >/dev/null 2>&1 || true
pm volume rm -af >/dev/null 2>&1 || true
pm secret rm askrelay-keys >/dev/null 2>&1 || true
pm network rm -f askrelay-kube >/dev/null 2>&1 || true
KUBE_IMAGE="localhost/$IMAGE"
$DOCKER save "$IMAGE" | pm load -q >/dev/null || fail "podman load of $IMAGE"
pm tag "$IMAGE" "$KUBE_IMAGE" 2>/dev/null || pm tag "docker.io/library/$IMAGE" "$KUBE_IMAGE" ||
    fail "podman tag $KUBE_IMAGE"
# The keys the manifests name (limits-1, parent-1, parent-2, child-1, child-2), as the documented command makes them.
host "$BIN/askrelay" keys generate --out "$RUN/kube-keys" --families 4 --guardians 2 --children 1 --limits 1 \
    --parent-hosts 2 --child-hosts 2 >/dev/null || fail "askrelay keys generate"
single="" brokers=2
"$BIN/askrelay-parent" --help | grep -q -- "--brokers" || { single="--single-broker-env"; brokers=1; }
python3 "$REPO/Tests/Deploy/kube-play.py" "$REPO/deploy/kubernetes" "$RUN/kube-keys" "$KUBE_IMAGE" \
    "$RUN/kube-play.yaml" --brokers $brokers $single | sed 's/^/  /' || fail "kube-play.py"
[ -z "$single" ] || say "  the workers have no --brokers yet (branch shard not merged): one broker, ASKRELAY_BROKER set"
pm network create askrelay-kube >/dev/null || fail "podman network create"
say "  played: $brokers broker pod(s) askrelay-broker-0..$((brokers - 1))"
pm kube play --network askrelay-kube "$RUN/kube-play.yaml" >"$RUN/kube-play.out" 2>&1 ||
    { grep -v '^\s' "$RUN/kube-play.out" | head -20; fail "podman kube play"; }
containers() { pm ps -a --format '{{.Names}}' | grep -v -- '-infra$'; }
say "  containers: $(containers | tr '\n' ' ')"
pm_logs_have() { pm logs "$1" 2>&1 | grep -q -- "$2"; }
kube_ready() {
    for i in $(seq 0 $((brokers - 1))); do
        pm_logs_have "askrelay-broker-$i-broker" "ready endpoints=" || return 1
        pm_logs_have "askrelay-broker-$i-limits" "ready id=" || return 1
    done &&
        for c in $(containers | grep -E '^askrelay-(parent|child)-'); do
            pm_logs_have "$c" "registered" || return 1
        done
}
wait_for "the played brokers ($brokers) with their limits workers, 2 parents and 2 children register" 120 kube_ready
# podman 4.3 turns the probes into health checks but runs them only from systemd timers: run the broker's once.
for i in $(seq 0 $((brokers - 1))); do
    wait_for "podman healthcheck run askrelay-broker-$i-broker (the readiness probe's command)" 30 \
        pm healthcheck run "askrelay-broker-$i-broker"
done
say "  every played container registered; the brokers' health checks pass"

phase "podman: SIGTERM (pod stop within terminationGracePeriodSeconds); every process drains and exits 0"
pods=$(pm pod ps --format '{{.Name}}')
# (podman 4.3 complains on stderr that it cannot remove the health checks' systemd timers: there are none.)
pm pod stop -t 30 $pods >/dev/null 2>"$RUN/pod-stop.err" || { cat "$RUN/pod-stop.err"; fail "podman pod stop"; }
failed=0
for c in $(containers); do
    code=$(pm inspect -f '{{.State.ExitCode}}' "$c")
    case "$c" in
        askrelay-broker-*-broker) drained=$(pm logs "$c" 2>&1 | grep -o "broker stopped" | tail -1) ;;
        *) drained=$(pm logs "$c" 2>&1 | grep -o "signal received, stopping" | tail -1) ;;
    esac
    say "  $c: exit $code; ${drained:-NO DRAIN LINE}"
    { [ "$code" = 0 ] && [ -n "$drained" ]; } || failed=1
done
[ $failed = 0 ] || fail "a played process did not drain"
pm kube down "$RUN/kube-play.yaml" >/dev/null 2>&1 || true
