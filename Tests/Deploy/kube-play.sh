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
scale=""
[ -n "$single" ] || scale="--scale-to 3"
python3 "$REPO/Tests/Deploy/kube-play.py" "$REPO/deploy/kubernetes" "$RUN/kube-keys" "$KUBE_IMAGE" \
    "$RUN/kube-play.yaml" --brokers $brokers $single $scale | sed 's/^/  /' || fail "kube-play.py"
[ -z "$single" ] || say "  the workers have no --brokers yet (branch shard not merged): one broker, ASKRELAY_BROKER set"
pm network create askrelay-kube >/dev/null || fail "podman network create"
say "  played: $brokers broker pod(s) askrelay-broker-0..$((brokers - 1))"
pm kube play --network askrelay-kube "$RUN/kube-play.yaml" >"$RUN/kube-play.out" 2>&1 ||
    { grep -v '^\s' "$RUN/kube-play.out" | head -20; fail "podman kube play"; }
containers() { pm ps -a --format '{{.Names}}' | grep -v -- '-infra$'; }
say "  containers: $(containers | tr '\n' ' ')"
# podman 4.3's netavark (1.4) leaves the bridge's MAC unset, so Linux gives the bridge the lowest MAC of its ports: a
# pod added or removed can change it, and the other pods' packets to the gateway, where aardvark-dns answers, are
# dropped until their neighbour entry is refreshed (3-42 s measured; netavark 1.9 sets a static MAC). A worker that
# reconnects by name meanwhile blocks in getaddrinfo on libzmq's I/O thread, and every connection of its process
# with it (docs/deployment.md, "Scaling the brokers"). Pinning the bridge's MAC keeps the gateway where the pods'
# neighbour entries say it is.
bridge=$(pm network inspect -f '{{.NetworkInterface}}' askrelay-kube) || fail "podman network inspect askrelay-kube"
ip link set "$bridge" address "$(cat "/sys/class/net/$bridge/address")" || fail "pin the MAC of bridge $bridge"
say "  bridge $bridge: MAC pinned at $(cat "/sys/class/net/$bridge/address")"
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

if [ -n "$scale" ]; then
# What `kubectl scale statefulset askrelay-broker --replicas=3`, the rebalance Job (deploy/kubernetes/scaling) and the
# scale back to 2 do (docs/deployment.md, "Scaling the brokers"), played: the new pod, the Job's pod up, the Job's
# pod down, the pod stopped. The families f2 and f4 move to broker 2 and back with their rosters, questions and
# children's limits state, while the children play their flows; every flow must finish (checked after the scale).
phase "podman: scale the brokers 2 -> 3 (pod askrelay-broker-2, rebalance Job epoch 1) and back (epoch 2, pod stopped) \
under the children's flows"
KUBE_FLOWS=40 # 4 families of one child each (the keys above), 10 flows each (deploy/kubernetes/child.yaml)
kube_records() {
    for c in $(containers | grep -E '^askrelay-child-'); do
        pm exec "$c" sh -c 'cat /var/lib/askrelay/child/*.jsonl 2>/dev/null' || true
    done
}
before_scale=$(kube_records | grep -c . || true)
say "  $before_scale of $KUBE_FLOWS child flows finished before the scale"
pm kube play --network askrelay-kube --configmap "$RUN/kube-play-configmap.yaml" "$RUN/kube-play-scale.yaml" \
    >"$RUN/kube-play-scale.out" 2>&1 || { grep -v '^\s' "$RUN/kube-play-scale.out" | head -20; fail "kube play scale"; }
added_ready() {
    pm_logs_have askrelay-broker-2-broker "ready endpoints=" && pm_logs_have askrelay-broker-2-limits "ready id="
}
wait_for "the added pod askrelay-broker-2: broker and limits worker ready" 60 added_ready
wait_for "podman healthcheck run askrelay-broker-2-broker (the readiness probe)" 30 \
    pm healthcheck run askrelay-broker-2-broker
say "  askrelay-broker-2 ready (its list: the ConfigMap's two brokers and itself)"
# kube_rebalance DIRECTION EPOCH: plays the Job's pod, waits for it to exit (podman wait), requires exit 0 and its
# 'rebalanced epoch=' line; prints its output and leaves the moved families in $moved.
kube_rebalance() {
    local pod="askrelay-rebalance-$2" code
    pm kube play --network askrelay-kube "$RUN/kube-play-rebalance-$1.yaml" >"$RUN/kube-play-$pod.out" 2>&1 ||
        { grep -v '^\s' "$RUN/kube-play-$pod.out" | head -20; fail "kube play $pod"; }
    code=$(CONTAINERS_CONF="$RUN/containers.conf" timeout 120 podman --root "$CACHE/podman" --runroot \
        "$PODMAN_RUN/run" --tmpdir "$PODMAN_RUN/tmp" wait "$pod-rebalance" 9>&-) || fail "$pod did not exit within 120 s"
    pm logs "$pod-rebalance" >"$RUN/$pod.log" 2>&1
    sed 's/^/    /' "$RUN/$pod.log"
    [ "$code" = 0 ] || fail "the rebalance Job's pod $pod exited $code"
    grep -q "^rebalanced epoch=$2 " "$RUN/$pod.log" || fail "$pod printed no 'rebalanced epoch=$2' line"
    moved=$(grep '^moved family=' "$RUN/$pod.log" | sed 's/.*family=\([^ ]*\).*/\1/' | sort | tr '\n' ' ')
    say "  $pod: exit 0, $(grep -c '^moved family=' "$RUN/$pod.log") families moved: $moved"
}
kube_rebalance up 1
up_moved=$moved
[ -n "$up_moved" ] || fail "the rebalance to 3 brokers moved no family"
# broker2 EXPRESSION: a figure of askrelay-broker-2's statistics s (askrelay top --json in its container).
broker2() {
    pm exec askrelay-broker-2-broker askrelay top --json --count 1 --timeout 5s |
        python3 -c "import json, sys; s = json.load(sys.stdin); print($1)"
}
broker2_holds() { [ "$(broker2 'sum(s["ledger"].values())')" -gt 0 ]; }
wait_for "askrelay-broker-2's statistics show the questions of $up_moved" 15 broker2_holds
say "  askrelay-broker-2 holds $up_moved: ledger $(broker2 's["ledger"]')"
kube_rebalance down 2
[ "$moved" = "$up_moved" ] || fail "back to 2 brokers moved [$moved], expected askrelay-broker-2's [$up_moved]"
# Settled: no question, nothing queued or in flight (a snapshot a second old may predate the move back).
broker2_empty() { [ "$(broker2 'sum(s["ledger"].values()) + s["queued"] + s["inflight"]')" = 0 ]; }
wait_for "askrelay-broker-2 holds no question, nothing queued or in flight" 15 broker2_empty
say "  askrelay-broker-2 after the rebalance to 2: ledger $(broker2 's["ledger"]'), queued 0, in flight 0"
# kubectl scale --replicas=2 deletes the pod: SIGTERM, the drain, exit 0 (its claims stay, as on a cluster).
pm pod stop -t 30 askrelay-broker-2 >/dev/null 2>"$RUN/pod-stop-2.err" || { cat "$RUN/pod-stop-2.err"; fail "stop"; }
for c in askrelay-broker-2-broker askrelay-broker-2-limits; do
    code=$(pm inspect -f '{{.State.ExitCode}}' "$c")
    [ "$code" = 0 ] || fail "$c exited $code on SIGTERM"
done
say "  askrelay-broker-2 stopped (SIGTERM, exit 0), as kubectl scale --replicas=2 does"
kube_flows_done() { [ "$(kube_records | grep -c . || true)" -ge $KUBE_FLOWS ]; }
wait_for "the children's $KUBE_FLOWS flows finish" 120 kube_flows_done
kube_records >"$RUN/kube-children.jsonl"
check_records "$RUN/kube-children.jsonl" $KUBE_FLOWS || fail "the played children's records"
say "  $((KUBE_FLOWS - before_scale)) flows finished during or after the scale; none expired or lost, none twice"
fi

phase "podman: SIGTERM (pod stop within terminationGracePeriodSeconds); every process drains and exits 0"
pods=$(pm pod ps --format '{{.Name}}')
# (podman 4.3 complains on stderr that it cannot remove the health checks' systemd timers: there are none.)
pm pod stop -t 30 $pods >/dev/null 2>"$RUN/pod-stop.err" || { cat "$RUN/pod-stop.err"; fail "podman pod stop"; }
failed=0
for c in $(containers | grep -v '^askrelay-rebalance-'); do
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
