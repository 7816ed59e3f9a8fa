#!/usr/bin/env bash
# The examples, unchanged, under PyTorch's torchrun (Debian's python3-torch), which
# serves its own store on MASTER_PORT: one host with 4 and 3 ranks, a restart, and two
# "nodes" on this host, with torchrun's default (static) rendezvous and with c10d's.
# Usage: torchrun_test.sh DIRECTORY-OF-THE-EXAMPLES CASE
# Exits 77 (skipped) when there is no torchrun. Each torchrun run is bounded by
# `timeout 120`; the examples check their own results against a serial computation.
set -u
examples=$1
case_name=$2
source "$(dirname "$0")/common.sh"
unset COLLECTIVES_TRANSPORT TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE TORCHELASTIC_RESTART_COUNT
torchrun=$(command -v torchrun) || skip "torchrun is not installed (on Debian 12: apt-get install python3-torch)"
export COLLECTIVES_JOB_TOKEN=torchrun-test-$$-$RANDOM

# What fail shows: the end of each job's output (torchrun's and its ranks', together).
show_output() {
  local f
  for f in "$work"/*.out; do
    echo "--- $(basename "$f"):"
    tail -c 3000 "$f"
  done
}

# A port nothing listens on now, from the kernel (bash has no other way to ask).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Debian's torchrun 1.13 (on Python 3.11) fails before starting any worker unless
# --redirects and --tee are given: it cannot read their default "0".
launch() {
  timeout 120 "$torchrun" --redirects 1 --tee 1 "$@"
}

# The output of a job whose rank 0 printed `line` (as the example does only once every
# rank has checked its results) and whose torchrun exited 0.
expect_verified() {
  local file=$1 status=$2 line=$3
  [[ $status == 0 ]] || fail "torchrun exited with status $status ($(basename "$file"))"
  grep -qF -- "[default0]:$line" "$file" || fail "rank 0 did not print '$line' ($(basename "$file"))"
  if grep -q 'FAILED:' "$file"; then fail "a rank failed ($(basename "$file"))"; fi
}

ring_verified="  hand-written ring == collectives::all_reduce<ring> == serial sum, on every rank"

test_four_ranks() {
  launch --nproc_per_node 4 --master_port "$(free_port)" --no_python "$examples/01_ring_all_reduce" >"$work/job.out" 2>&1
  expect_verified "$work/job.out" $? "$ring_verified"
  grep -qF '[default0]:ring all-reduce of 1003 floats over 4 ranks' "$work/job.out" || fail "not 4 ranks"
}

test_three_ranks() {
  launch --nproc_per_node 3 --master_port "$(free_port)" --no_python "$examples/02_distributed_mean" >"$work/job.out" 2>&1
  expect_verified "$work/job.out" $? "  all results match the serial computation on every rank"
  grep -qE '^\[default0\]:dataset of [0-9]+ samples in 3 shards' "$work/job.out" || fail "not 3 ranks"
}

# Rank 1 fails the first attempt after the others have joined the store; torchrun
# restarts every rank, and the second attempt meets under keys of its own.
test_restart() {
  cat >"$work/flaky.sh" <<'EOF'
#!/bin/sh
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then sleep 2; echo "rank 1 fails attempt 0" >&2; exit 3; fi
exec "$@"
EOF
  chmod +x "$work/flaky.sh"
  COLLECTIVES_STARTUP_TIMEOUT=20 launch --nproc_per_node 3 --max_restarts 1 --master_port "$(free_port)" --no_python \
    "$work/flaky.sh" "$examples/01_ring_all_reduce" >"$work/job.out" 2>&1
  expect_verified "$work/job.out" $? "$ring_verified"
  grep -qF 'rank 1 fails attempt 0' "$work/job.out" || fail "rank 1 did not fail its first attempt"
}

# Two torchrun invocations, as on two hosts, with two ranks each; `rendezvous` holds
# torchrun's options for it. Sets node0 and node1 to their exit statuses.
two_nodes() {
  local n pids=()
  for n in 0 1; do
    launch --nnodes 2 --nproc_per_node 2 "$@" --no_python "$examples/01_ring_all_reduce" >"$work/node$n.out" 2>&1 &
    pids+=($!)
    set -- "${@/--node_rank=0/--node_rank=1}"
  done
  wait "${pids[0]}"
  node0=$?
  wait "${pids[1]}"
  node1=$?
}

# Both nodes' torchrun succeeded, and rank 0, on one of them, verified the ring.
expect_both_nodes_verified() {
  local verified=0
  for n in 0 1; do
    local status=node$n
    [[ ${!status} == 0 ]] || fail "node $n: torchrun exited with status ${!status}"
    grep -qF -- "[default0]:$ring_verified" "$work/node$n.out" && verified=$((verified + 1))
  done
  [[ $verified == 1 ]] || fail "rank 0 (on one node only) did not print '$ring_verified'"
}

test_two_nodes_static() {
  two_nodes --node_rank=0 --master_addr 127.0.0.1 --master_port "$(free_port)"
  expect_both_nodes_verified
  grep -qF '[default0]:ring all-reduce of 1003 floats over 4 ranks' "$work/node0.out" || fail "not 4 ranks"
}

test_two_nodes_c10d() {
  two_nodes --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$(free_port)" --rdzv_id "test-$$"
  expect_both_nodes_verified
}

# The store admits anyone, but the ranks still prove the job token to each other.
test_two_nodes_other_token() {
  local port
  port=$(free_port)
  COLLECTIVES_STARTUP_TIMEOUT=5 launch --nnodes 2 --nproc_per_node 2 --node_rank 0 --master_addr 127.0.0.1 \
    --master_port "$port" --no_python "$examples/01_ring_all_reduce" >"$work/node0.out" 2>&1 &
  local first=$!
  COLLECTIVES_JOB_TOKEN=another-token COLLECTIVES_STARTUP_TIMEOUT=5 launch --nnodes 2 --nproc_per_node 2 \
    --node_rank 1 --master_addr 127.0.0.1 --master_port "$port" --no_python "$examples/01_ring_all_reduce" \
    >"$work/node1.out" 2>&1
  local second=$?
  wait "$first"
  local status=$?
  [[ $status != 0 && $second != 0 ]] || fail "torchrun exited with status $status and $second, expected failures"
  grep -qF 'the other end refused this job token' "$work/node1.out" || fail "node 1 did not report the refused token"
  grep -qF 'wrong job token' "$work/node0.out" || fail "node 0 did not report the wrong token"
  if grep -q '^\[default0\]:.*serial sum' "$work"/node*.out; then fail "a rank printed a result"; fi
}

run_case
