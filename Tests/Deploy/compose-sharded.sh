# Sourced by Tests/Deploy/deploy-test.sh after the single-broker compose phases: compose/docker-compose.sharded.yml
# under the same dockerd. Uses that script's helpers (phase, fail, say, wait_for, elapsed, check_records) and variables
# (RUN, DOCKER, IMAGE, REPO, SHARDED).
#
# Brokers b0 and b1 serve 12 families (b2 runs, out of the list), one limits worker each, a parent and two child
# containers on the list b0,b1. Under their flows: `rebalance --from b0,b1 --to b0,b1,b2 --epoch 1` (f4, f7, f11 move
# to b2), flows go on, `rebalance --from b0,b1,b2 --to b0,b1 --epoch 2` (they move back; b2 holds nothing), b2 and its
# limits worker are stopped, the children finish. Then every child record: finished, none expired or lost, no
# response twice.

SHARDED_FAMILIES=12 SHARDED_FLOWS=80
phase "sharded compose up (b0, b1 serving, b2 idle; a limits worker each; a parent and 2 children on b0,b1)"
export ASKRELAY_IMAGE="$IMAGE"
export ASKRELAY_PARENT_REPLICAS=1 ASKRELAY_CHILD_REPLICAS=2
export ASKRELAY_FAMILIES=$SHARDED_FAMILIES ASKRELAY_GUARDIANS_PER_FAMILY=2 ASKRELAY_CHILDREN_PER_FAMILY=1
export ASKRELAY_POLICY=approve ASKRELAY_PARENT_THINK=fixed:20ms
# 200 contacts per child: most flows ask a question (few known handles), so the moves carry open questions.
export ASKRELAY_FLOWS=$SHARDED_FLOWS ASKRELAY_CONTACTS=200 ASKRELAY_CHILD_THINK=400ms ASKRELAY_CANCEL_PROBABILITY=0.1
export ASKRELAY_LOG_LEVEL=info ASKRELAY_HEARTBEAT=1s
timeout 120 "${SHARDED[@]}" up -d --no-build --scale child=2 >"$RUN/sharded-up.log" 2>&1 ||
    { cat "$RUN/sharded-up.log"; fail "docker-compose up (sharded)"; }
sharded_id() { "${SHARDED[@]}" ps -q "$1"; }
healthy() { [ "$($DOCKER inspect -f '{{.State.Health.Status}}' "$(sharded_id "$1")")" = healthy ]; }
for b in b0 b1 b2; do wait_for "broker $b's health check (askrelay top)" 90 healthy "$b"; done
sharded_logs_have() { "${SHARDED[@]}" logs --no-color "$1" 2>/dev/null | grep -c -- "$2" || true; }
sharded_ready() {
    for b in b0 b1 b2; do [ "$(sharded_logs_have "limits-$b" 'ready id=')" -ge 1 ] || return 1; done
    [ "$(sharded_logs_have parent 'ready guardians=')" -ge 1 ] && [ "$(sharded_logs_have child 'ready children=')" -ge 2 ]
}
wait_for "3 limits workers, the parent and 2 children print their ready line" 60 sharded_ready
say "  brokers b0, b1, b2 healthy; running: $("${SHARDED[@]}" ps --services --filter status=running | sort | tr '\n' ' ')"

phase "sharded: rebalance 2 -> 3 -> 2 brokers under the children's flows, then stop b2"
CHILD_CONTAINERS=$("${SHARDED[@]}" ps -q child)
# Finished flows so far: the lines of both children's records (each container sees the shared records volume).
flows_done() {
    $DOCKER exec "$(head -1 <<<"$CHILD_CONTAINERS")" sh -c 'cat /var/lib/askrelay/records/child-*.jsonl | wc -l'
}
at_least() { [ "$(flows_done)" -ge "$1" ]; }
# One rebalance through the documented one-shot service; its output is kept, its moved lines counted.
rebalance() {
    local out="$RUN/rebalance-epoch-$3.out" began
    began=$(date +%s.%N)
    timeout 120 "${SHARDED[@]}" run --rm -T rebalance --from "$1" --to "$2" --epoch "$3" --timeout 30s \
        >"$out" 2>"$out.err" || { cat "$out" "$out.err"; fail "rebalance --from $1 --to $2 --epoch $3"; }
    grep -q "^rebalanced epoch=$3 " "$out" || { cat "$out" "$out.err"; fail "no 'rebalanced epoch=$3' line"; }
    say "  rebalance --from $1 --to $2 --epoch $3 ($(elapsed "$began") s with the container): \
$(grep -c '^moved family=' "$out") families moved"
    sed 's/^/    /' "$out"
}
wait_for "the children finish 24 flows on b0, b1" 60 at_least 24
say "  $(flows_done) flows finished before the first rebalance"
rebalance b0,b1 b0,b1,b2 1
up=$(grep '^moved family=' "$RUN/rebalance-epoch-1.out" | sed 's/.*family=\([^ ]*\).*/\1/' | sort | tr '\n' ' ')
[ -n "$up" ] || fail "the rebalance to b0,b1,b2 moved no family"
grep '^moved family=' "$RUN/rebalance-epoch-1.out" | grep -qv ' to=b2 ' && fail "a family moved elsewhere than to b2"
mark=$(flows_done)
wait_for "24 more flows finish with b2 serving ($up)" 60 at_least $((mark + 24))
b2_snapshot() { $DOCKER exec "$(sharded_id b2)" askrelay top --json --count 1 --timeout 5s; }
b2_served=$(b2_snapshot | python3 -c 'import json, sys; print(json.load(sys.stdin)["delivered"])') ||
    fail "no statistics snapshot from b2"
say "  $(flows_done) flows finished; b2 has delivered $b2_served messages"
[ "$b2_served" -gt 0 ] || fail "b2 delivered nothing after the families moved to it"
rebalance b0,b1,b2 b0,b1 2
down=$(grep '^moved family=' "$RUN/rebalance-epoch-2.out" | sed 's/.*family=\([^ ]*\).*/\1/' | sort | tr '\n' ' ')
[ "$down" = "$up" ] || fail "back to b0,b1 moved [$down], expected exactly b2's families [$up]"
grep '^moved family=' "$RUN/rebalance-epoch-2.out" | grep -qv ' from=b2 ' && fail "a family moved that b2 did not hold"
# b2_held: exit 0 when b2's statistics show no question, nothing queued or in flight (printed, and kept in b2-held).
b2_held() {
    b2_snapshot | python3 -c "$(cat <<'PY'
import json, sys
s = json.load(sys.stdin)
held = {"questions": sum(s["ledger"].values()), "queued": s["queued"], "inflight": s["inflight"]}
print(" ".join(f"{key}={value}" for key, value in held.items()), "sessions=" + json.dumps(s["sessions"]))
sys.exit(0 if not any(held.values()) else 1)
PY
)" 2>&1 | tee "$RUN/b2-held"
}
# b2 has settled, so it can be stopped. (A snapshot is published every second: the first may predate the move back.)
deadline=$(($(date +%s) + 15))
until b2_held >/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] ||
        fail "b2 still holds something 15 s after the rebalance to b0,b1: $(cat "$RUN/b2-held" 2>/dev/null)"
    sleep 0.5
done
say "  b2 after the rebalance to b0,b1: $(b2_held)"
timeout 60 "${SHARDED[@]}" stop b2 limits-b2 >"$RUN/sharded-stop-b2.log" 2>&1 ||
    { cat "$RUN/sharded-stop-b2.log"; fail "stop b2"; }
[ "$($DOCKER inspect -f '{{.State.ExitCode}}' "$(sharded_id b2)")" = 0 ] || fail "b2 did not exit 0 on SIGTERM"
mark=$(flows_done)
say "  b2 and limits-b2 stopped (SIGTERM, exit 0) after $mark flows"
children_finished() { [ "$(sharded_logs_have child 'done flows=')" -ge 2 ]; }
wait_for "both children finish their flows on b0, b1 without b2" 120 children_finished
[ "$(flows_done)" -gt "$mark" ] || fail "no flow finished after b2 stopped"
say "  $(flows_done) flows finished, $(( $(flows_done) - mark )) of them after b2 stopped"

phase "sharded records: every flow finished, none expired or lost, no response twice; SIGTERM drain"
$DOCKER exec "$(head -1 <<<"$CHILD_CONTAINERS")" sh -c 'cat /var/lib/askrelay/records/child-*.jsonl' \
    >"$RUN/sharded-children.jsonl"
# 12 families x 1 child x $SHARDED_FLOWS flows, over the two child containers.
check_records "$RUN/sharded-children.jsonl" $((SHARDED_FAMILIES * SHARDED_FLOWS)) || fail "sharded children records"
timeout 120 "${SHARDED[@]}" stop >"$RUN/sharded-stop.log" 2>&1 || { cat "$RUN/sharded-stop.log"; fail "stop"; }
failed=0
for c in $("${SHARDED[@]}" ps -q); do
    name=$($DOCKER inspect -f '{{.Name}}' "$c" | tr -d /)
    code=$($DOCKER inspect -f '{{.State.ExitCode}}' "$c")
    case "$name" in *_keys_*) continue ;; esac
    [ "$code" = 0 ] || { say "  $name: exit $code"; failed=1; }
done
[ $failed = 0 ] || fail "a sharded process did not exit 0 on SIGTERM"
say "  every sharded container exited 0 on SIGTERM"
timeout 60 "${SHARDED[@]}" down -v >/dev/null 2>&1 || true
