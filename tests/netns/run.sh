#!/usr/bin/env bash
# Several hosts as several hosts: network namespaces ("hosts") joined by veth pairs to
# a switch in a namespace of its own, one rank of a collectives-run job per host, the
# TCP transport between them. The host's own network is never touched: every link,
# address and route lives inside namespaces this script creates (names include $$) and
# removes again on exit, also when a case fails or the script is interrupted.
#
# usage: run.sh COLLECTIVES_RUN NETNS_WORKER NETNS_HUB [CASE...]     (default: all)
#
# cases:
#   plain          4 hosts on 10.201.0.0/24, all collectives, buffers up to 4 MiB
#   delay_loss_2   3 hosts, every frame delayed 5 ms +- 1 ms, 2% lost
#   delay_loss_5   the same with 5% lost
#   ipv6           3 hosts, the master address the IPv6 ULA fd00:201::1
#   rank_killed    3 hosts; the rank on host 2 is killed (SIGKILL) mid-run: the others
#                  must fail with an error, soon, instead of hanging
#   link_down      3 hosts; host 2's switch port goes down mid-run (no FIN, no RST):
#                  every rank must fail within its deadline (COLLECTIVES_TIMEOUT=5)
#   two_per_host   2 hosts of 2 ranks each: the hierarchical all_reduce and groups by
#                  host (split_by_host) across real hosts
#
# Not run by default, as they need NETNS_WORKER built with rdma (netns_worker_rdma):
#   rdma_plain     as plain (3 hosts), over the rdma transport on libfabric's tcp
#                  provider (COLLECTIVES_TRANSPORT=rdma, COLLECTIVES_FABRIC_PROVIDER=tcp)
#   rdma_rank_killed  as rank_killed, over rdma: another host's death is seen by
#                  probes (or a failed transfer), not a pidfd; survivors report peer lost
#
# Not run by default (a measurement, for bench/hierarchical):
#   hierarchical_speed  2 hosts of 2 ranks, the switch's ports limited to
#                  NETNS_RATE_MBIT (default 1000) Mbit/s: 64 MiB all_reduce with ring,
#                  hierarchical and automatic (with tcp's link costs and measured ones,
#                  COLLECTIVES_TUNE=1), NETNS_ROUNDS (default 3) rounds of each, taking
#                  turns; the perf program is NETNS_PERF (all_reduce_perf)
#
# Delay and loss come from `tc qdisc ... netem` on each host's interface where the
# kernel has sch_netem; where it does not, from netns_hub, a user-space switch that
# delays and drops frames the same way (NETNS_IMPAIR=netem or hub forces one).
#
# Exit status: 0 all cases passed, 1 a case failed, 2 bad usage, 77 namespaces cannot
# be made here (not root, no iproute2, no permission), which ctest shows as skipped.
set -u -o pipefail

if (($# < 3)); then
  echo "usage: $0 COLLECTIVES_RUN NETNS_WORKER NETNS_HUB [CASE...]" >&2
  exit 2
fi
launcher=$(realpath "$1")
worker=$(realpath "$2")
hub=$(realpath "$3")
shift 3
all_cases=(plain delay_loss_2 delay_loss_5 ipv6 rank_killed link_down two_per_host)
extra_cases=(rdma_plain rdma_rank_killed hierarchical_speed)
cases=("$@")
((${#cases[@]})) || cases=("${all_cases[@]}")
for c in "${cases[@]}"; do
  [[ " ${all_cases[*]} ${extra_cases[*]} " == *" $c "* ]] ||
    { echo "run.sh: unknown case '$c' (cases: ${all_cases[*]} ${extra_cases[*]})" >&2; exit 2; }
done
for f in "$launcher" "$worker" "$hub"; do
  [[ -x $f ]] || { echo "run.sh: $f is not an executable" >&2; exit 2; }
done

# The job must come from the launcher alone, not from whatever started this script.
unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK COLLECTIVES_JOB_TOKEN \
  COLLECTIVES_STORE_DIR COLLECTIVES_SOCKET_IFNAME COLLECTIVES_CHECK_CALLS COLLECTIVES_DEBUG COLLECTIVES_TIMEOUT \
  COLLECTIVES_STARTUP_TIMEOUT COLLECTIVES_TRANSPORT COLLECTIVES_FABRIC_PROVIDER FI_PROVIDER FI_TCP_IFACE
for v in $(compgen -e | grep -E '^(OMPI_COMM_WORLD_|PMI_|PMIX_|SLURM_)'); do unset "$v"; done

port=29500  # free in any namespace: these are new
prefix="coll$$"
namespaces=()  # every namespace made, for cleanup
pids=()        # every background process started, for cleanup
work=$(mktemp -d /tmp/collectives-netns.XXXXXX)

any_alive() {
  local pid
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && { echo 1; return; }; done
  echo 0
}
cleanup() {
  local pid ns tries
  # SIGTERM first: `timeout` passes it to its launcher, which stops its ranks.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for ((tries = 0; tries < 50 && $(any_alive); tries++)); do sleep 0.1; done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  for ns in "${namespaces[@]}"; do ip netns delete "$ns" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted" >&2; exit 130' INT
trap 'echo "run.sh: terminated" >&2; exit 143' TERM

now() { echo "$EPOCHREALTIME"; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

skip() {
  echo "SKIP: cannot create network namespaces (needs root and iproute2): $*"
  exit 77
}

# Can this machine make namespaces, veth pairs and bridges? Otherwise skip.
probe() {
  [[ $(id -u) == 0 ]] || skip "not root (uid $(id -u))"
  command -v ip >/dev/null || skip "no 'ip' command"
  command -v timeout >/dev/null || skip "no 'timeout' command"
  local ns="${prefix}probe" out
  namespaces+=("$ns")  # cleaned up even if only half made
  out=$(ip netns add "$ns" 2>&1) || skip "ip netns add: $out"
  out=$(ip -n "$ns" link add name probe0 type veth peer name probe1 2>&1) || skip "veth pair: $out"
  out=$(ip -n "$ns" link add name br0 type bridge 2>&1) || skip "bridge: $out"
  ip netns delete "$ns"
}

current_case=""
fail() {
  echo "FAIL ($current_case): $*"
  stop_hub  # for its counts in hub.log
  local f
  for f in "$work"/*.log; do
    [[ -e $f ]] || continue
    echo "--- $(basename "$f") (last 40 lines, without the algorithm choices):"
    grep -v 'collectives INFO: rank [0-9]*: ' "$f" | tail -n 40
  done
  exit 1
}

# Makes hosts 0..n-1 (namespaces ${prefix}-sS-hK, interface eth0 with 10.201.0.K+1/24
# and fd00:201::K+1/64) and the switch (${prefix}-sS-sw: bridge br0 over ports pK,
# the other ends of the hosts' veth pairs). Sets hosts[] and switch.
scenario_count=0
make_hosts() {
  local n=$1 k ns
  scenario_count=$((scenario_count + 1))
  local base="${prefix}-s${scenario_count}"
  switch="${base}-sw"
  ip netns add "$switch" || fail "ip netns add $switch"
  namespaces+=("$switch")
  # The switch itself stays silent: no addresses, no IPv6 of its own.
  ip netns exec "$switch" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n "$switch" link set lo up
  ip -n "$switch" link add name br0 type bridge stp_state 0 || fail "bridge"
  ip -n "$switch" link set br0 up
  hosts=()
  for ((k = 0; k < n; k++)); do
    ns="${base}-h${k}"
    ip netns add "$ns" || fail "ip netns add $ns"
    namespaces+=("$ns")
    hosts+=("$ns")
    ip -n "$ns" link set lo up
    ip -n "$switch" link add name "p$k" type veth peer name eth0 netns "$ns" || fail "veth pair for host $k"
    ip -n "$switch" link set "p$k" master br0 up
    ip -n "$ns" addr add "10.201.0.$((k + 1))/24" dev eth0
    ip -n "$ns" addr add "fd00:201::$((k + 1))/64" dev eth0 nodad
    ip -n "$ns" link set eth0 up
  done
}

# Every frame between hosts: delayed DELAY_MS +- JITTER_MS, lost with LOSS_PERCENT.
impaired_by=""
impair() {
  local delay=$1 jitter=$2 loss=$3 k mode=${NETNS_IMPAIR:-auto} out
  if [[ $mode != hub ]]; then
    if out=$(ip netns exec "${hosts[0]}" tc qdisc add dev eth0 root netem delay "${delay}ms" "${jitter}ms" loss "${loss}%" 2>&1); then
      for ((k = 1; k < ${#hosts[@]}; k++)); do
        ip netns exec "${hosts[$k]}" tc qdisc add dev eth0 root netem delay "${delay}ms" "${jitter}ms" loss "${loss}%" ||
          fail "netem on host $k"
      done
      impaired_by="tc netem on each host's eth0"
      return
    fi
    [[ $mode == netem ]] && fail "tc netem: $out"
    echo "  (tc netem is not available here: $out; using netns_hub, a user-space switch that delays and drops frames)"
  fi
  # The user-space switch replaces the bridge: the ports leave br0, and hosts send
  # single segments (no TSO/GSO), so that a loss costs one segment as on a real wire.
  for ((k = 0; k < ${#hosts[@]}; k++)); do
    ip -n "$switch" link set "p$k" nomaster
    ip -n "$switch" link set "p$k" promisc on
    ip netns exec "${hosts[$k]}" "$hub" --offload-off eth0 || fail "offloads off on host $k"
  done
  local ports=()
  for ((k = 0; k < ${#hosts[@]}; k++)); do ports+=("p$k"); done
  ip netns exec "$switch" "$hub" --delay-ms "$delay" --jitter-ms "$jitter" --loss "$(awk -v l="$loss" 'BEGIN { print l / 100 }')" "${ports[@]}" \
    >"$work/hub.log" 2>&1 &
  hub_pid=$!
  pids+=("$hub_pid")
  impaired_by="netns_hub (user-space switch)"
}

stop_hub() {
  [[ -n ${hub_pid:-} ]] || return 0
  kill -TERM "$hub_pid" 2>/dev/null
  wait "$hub_pid" 2>/dev/null
  hub_pid=""
  hub_stats=$(grep -o '[0-9]* frames in.*' "$work/hub.log" | head -n 1)
}

# Starts one launcher per host, `collectives-run --nnodes N --node-rank K ... -n
# $ranks_per_host WORKER ARGS` under `timeout LIMIT`, with a fresh job token and
# COLLECTIVES_TIMEOUT=$call_deadline. Output goes to $work/rankK.log (host K's ranks);
# sets launcher_pids[]. With own_hosts=1 each host also gets a name (${prefix}-hK) and
# process ids of its own (UTS and pid namespaces): network namespaces share the
# machine's otherwise, and rdma, which watches a peer's process where its pids mean
# the same, would not probe them as it probes other hosts.
ranks_per_host=1
own_hosts=0
start_job() {
  local master=$1 limit=$2 k
  shift 2
  local token
  token=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  launcher_pids=()
  local named=()
  for ((k = 0; k < ${#hosts[@]}; k++)); do
    ((own_hosts)) && named=(unshare --uts --pid --fork -- sh -c 'hostname "$0" && exec "$@"' "${prefix}-h$k")
    COLLECTIVES_JOB_TOKEN=$token COLLECTIVES_DEBUG=INFO COLLECTIVES_TIMEOUT=$call_deadline \
      timeout -k 5 "$limit" ip netns exec "${hosts[$k]}" "${named[@]}" \
      "$launcher" --nnodes "${#hosts[@]}" --node-rank "$k" --master-addr "$master" --master-port "$port" \
      -n "$ranks_per_host" "$worker" "$@" >"$work/rank$k.log" 2>&1 &
    launcher_pids+=($!)
    pids+=($!)
  done
}

# Waits for every launcher; statuses[K] is host K's exit status.
wait_job() {
  local k
  statuses=()
  for ((k = 0; k < ${#launcher_pids[@]}; k++)); do
    wait "${launcher_pids[$k]}"
    statuses[k]=$?
  done
}

# Each rank said where it listens (COLLECTIVES_DEBUG=INFO): on eth0, at its own
# namespace address, and so do the addresses it was given for the others.
check_addresses() {
  local family=$1 k line want
  for ((k = 0; k < ${#hosts[@]}; k++)); do
    line=$(grep -m 1 "collectives INFO: tcp rank $k of ${#hosts[@]} on" "$work/rank$k.log") ||
      fail "rank $k printed no 'tcp rank $k of ${#hosts[@]} on ...' line"
    if [[ $family == 4 ]]; then want="10.201.0.$((k + 1))"; else want="fd00:201::$((k + 1))"; fi
    [[ $line == *" on eth0 "* ]] || fail "rank $k did not listen on eth0: $line"
    [[ $line == *"$want"* ]] || fail "rank $k did not use its namespace address $want: $line"
    if [[ $line == *127.0.0.1* || $line == *"[::1]"* || $line == *" lo "* ]]; then fail "rank $k used loopback: $line"; fi
    local r
    for ((r = 0; r < ${#hosts[@]}; r++)); do
      if [[ $family == 4 ]]; then want="$r=10.201.0.$((r + 1)):"; else want="$r=[fd00:201::$((r + 1))]:"; fi
      [[ $line == *"$want"* ]] || fail "rank $k does not list rank $r at ${want#*=}...: $line"
    done
    if [[ $k == 0 ]]; then first_info=${line#*collectives INFO: tcp }; first_info=${first_info%%;*}; fi
  done
}

# A job that must succeed: every launcher exits 0, every rank reports its results exact.
run_good_job() {
  local master=$1 family=$2 limit=$3
  shift 3
  start_job "$master" "$limit" "$@"
  wait_job
  local k
  for ((k = 0; k < ${#hosts[@]}; k++)); do
    ((statuses[k] == 124 || statuses[k] == 137)) && fail "host $k's launcher ran past ${limit} s (status ${statuses[k]})"
    ((statuses[k] == 0)) || fail "host $k's launcher exited with status ${statuses[k]}"
    grep -q "^\[$k\] ok: rank $k of ${#hosts[@]}: " "$work/rank$k.log" || fail "rank $k did not report its results exact"
  done
  check_addresses "$family"
  result=$(grep -o 'ok: rank 0 .*' "$work/rank0.log" | sed 's/^ok: rank 0 of [0-9]*: //')
}

call_deadline=20  # COLLECTIVES_TIMEOUT, seconds per call: none needs more than a few

# 2 hosts of 2 ranks: ranks 0 and 1 on host 0, 2 and 3 on host 1. Every rank reports its
# results exact and sees 2 hosts of 2 ranks.
case_two_per_host() {
  make_hosts 2
  ranks_per_host=2
  start_job 10.201.0.1 120 --max-elements 262147
  wait_job
  ranks_per_host=1
  local k r
  for ((k = 0; k < 2; k++)); do
    ((statuses[k] == 0)) || fail "host $k's launcher exited with status ${statuses[k]}"
    for r in $((2 * k)) $((2 * k + 1)); do
      grep -q "^\[$r\] ok: rank $r of 4: .* on 2 hosts of 2 ranks$" "$work/rank$k.log" ||
        fail "rank $r (host $k) did not report its results exact on 2 hosts of 2 ranks"
    done
  done
  result=$(grep -o 'ok: rank 0 .*' "$work/rank0.log" | sed 's/^ok: rank 0 of [0-9]*: //')
  pass "2 hosts x 2 ranks, rank 0: $result"
}

# The measurement behind docs/performance.md's hierarchical figure (bench/hierarchical).
case_hierarchical_speed() {
  local perf=${NETNS_PERF:?NETNS_PERF: the all_reduce_perf program} rate=${NETNS_RATE_MBIT:-1000}
  local rounds=${NETNS_ROUNDS:-3} round algo k tune
  make_hosts 2
  # The switch's ports at $rate Mbit/s (frames whole, offloads on: the hub forwards
  # 64 KiB segments, so it keeps up); on each host the ranks meet over loopback.
  for ((k = 0; k < 2; k++)); do
    ip -n "$switch" link set "p$k" nomaster
    ip -n "$switch" link set "p$k" promisc on
  done
  ip netns exec "$switch" "$hub" --rate-mbit "$rate" p0 p1 >"$work/hub.log" 2>&1 &
  hub_pid=$!
  pids+=("$hub_pid")
  worker=$perf
  ranks_per_host=2
  call_deadline=120
  # automatic twice: with tcp's own link costs, and with measured ones (COLLECTIVES_TUNE=1).
  for ((round = 0; round < rounds; round++)); do
    for algo in ring hierarchical automatic tuned; do
      tune=$([[ $algo == tuned ]] && echo 1 || echo "")
      COLLECTIVES_TUNE=$tune start_job 10.201.0.1 300 -b 64M -e 64M -n 5 -w 1 --transport tcp \
        --algo "$([[ $algo == ring || $algo == hierarchical ]] && echo "$algo" || echo auto)" --json "$work/$algo.json"
      wait_job
      for ((k = 0; k < 2; k++)); do
        ((statuses[k] == 0)) || fail "$algo, round $round: host $k's launcher exited with status ${statuses[k]}"
      done
      grep -m 1 -E '^\[0\] +67108864 ' "$work/rank0.log" | sed "s/^/  $algo: /"
      if [[ $algo == automatic || $algo == tuned ]]; then
        grep -o -m 1 -E 'link costs measured.*' "$work/rank0.log" | sed "s/^/  $algo: /"
        grep -o -m 1 -E 'all_reduce of 67108864 bytes runs [a-z_]+' "$work/rank0.log" | sed "s/^/  $algo: /"
      fi
    done
  done
  python3 - "$work" "$rate" <<'PY'
import json, statistics, sys
work, rate = sys.argv[1], sys.argv[2]
median = {a: statistics.median(json.loads(l)["time_us"] for l in open(f"{work}/{a}.json") if l.strip())
          for a in ("ring", "hierarchical", "automatic", "tuned")}
print(f"  64 MiB all_reduce, 2 hosts x 2 ranks, links between hosts at {rate} Mbit/s (medians):")
print("  " + ", ".join(f"{a} {t / 1000:.0f} ms" for a, t in median.items()) +
      f": hierarchical {median['ring'] / median['hierarchical']:.2f}x faster than ring")
PY
  stop_hub
  pass "hierarchical against ring measured; hub: ${hub_stats:-?}"
}
summary=()
pass() {
  local line
  line=$(printf '%-13s %6s s  %s' "$current_case" "$(seconds_since "$case_start")" "$*")
  echo "PASS $line"
  summary+=("$line")
}

case_plain() {
  make_hosts 4
  run_good_job 10.201.0.1 4 120 --max-elements 1048576
  pass "4 hosts, rank 0: $result; $first_info"
}

delay_loss() {
  local loss=$1
  make_hosts 3
  impair 5 1 "$loss"
  run_good_job 10.201.0.1 4 150 --max-elements 65537 --all-ops-max 4099
  stop_hub
  pass "3 hosts, delay 5 ms +- 1 ms, loss $loss% by $impaired_by${hub_stats:+ ($hub_stats)}; rank 0: $result"
}
case_delay_loss_2() { delay_loss 2; }
case_delay_loss_5() { delay_loss 5; }

case_ipv6() {
  make_hosts 3
  run_good_job fd00:201::1 6 120 --max-elements 262147
  pass "3 hosts over IPv6, rank 0: $result; $first_info"
}

# Starts a --loop job with a 5 s deadline per call, waits until host 2's rank has
# finished a call and printed its pid, then does what "$@" says; every launcher must
# then exit within `bound` seconds. Sets victim_pid and elapsed (seconds after the act).
failure_case() {
  local bound=$1
  shift
  make_hosts 3
  call_deadline=5
  start_job 10.201.0.1 60 --loop
  call_deadline=20
  local waited=0
  victim_pid=""
  while [[ -z $victim_pid ]]; do
    victim_pid=$(sed -n 's/^\[2\] ready pid=\([0-9]*\)$/\1/p' "$work/rank2.log" | head -n 1)
    [[ -n $victim_pid ]] && break
    ((waited++ < 300)) || fail "host 2's rank never said it was ready"
    sleep 0.1
  done
  local acted
  acted=$(now)
  "$@"
  wait_job
  elapsed=$(seconds_since "$acted")
  awk -v e="$elapsed" -v b="$bound" 'BEGIN { exit !(e < b) }' ||
    fail "the job took $elapsed s to end after the fault, expected < $bound s"
  if [[ ${COLLECTIVES_TRANSPORT:-} == rdma ]]; then check_rdma_ranks; else check_addresses 4; fi
}

# How each rank failed: "rank: error" for ranks 0.. that caught collectives::error.
errors_of() {
  local k out=()
  for ((k = 0; k < ${#hosts[@]}; k++)); do
    out+=("$(sed -n "s/^\[$k\] collectives error (rank $k, \([^)]*\)).*/$k: \1/p" "$work/rank$k.log" | head -n 1)")
  done
  local IFS=,
  echo "${out[*]}" | sed 's/,,*/, /g; s/^, //; s/, $//'
}

case_rank_killed() {
  failure_case 12 kill_victim
  ((statuses[2] == 137)) || fail "host 2's launcher exited with ${statuses[2]}, expected 137 (its rank was killed)"
  local k
  for k in 0 1; do
    ((statuses[k] == 3)) || fail "host $k's launcher exited with ${statuses[k]}, expected 3 (its rank caught collectives::error)"
  done
  pass "rank 2 killed (SIGKILL); the job ended ${elapsed} s later; errors: $(errors_of)"
}
kill_victim() { kill -KILL "$victim_pid"; }
# Where host 2 has pids of its own, the pid it printed means nothing here: its worker
# is found among the processes of its network namespace.
kill_worker_of_host_2() {
  local p
  for p in $(ip netns pids "${hosts[2]}"); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == "$(basename "$worker" | cut -c1-15)" ]] && kill -KILL "$p"
  done
}

case_link_down() {
  failure_case 15 take_port_down
  local k
  for k in 0 1 2; do
    ((statuses[k] == 124 || statuses[k] == 137)) && fail "host $k's job was still running after 60 s: it hung"
    ((statuses[k] == 3)) || fail "host $k's launcher exited with ${statuses[k]}, expected 3 (its rank caught collectives::error)"
  done
  pass "host 2's switch port down; the job ended ${elapsed} s later (deadline 5 s); errors: $(errors_of)"
}
take_port_down() { ip -n "$switch" link set p2 down || fail "ip link set p2 down"; }

# The rdma cases: netns_worker_rdma over libfabric's tcp provider. Each rank says
# (COLLECTIVES_DEBUG=INFO) which provider and domain it uses: tcp, on eth0, since the
# job spans hosts and loopback won't do.
check_rdma_ranks() {
  local k line
  for ((k = 0; k < ${#hosts[@]}; k++)); do
    line=$(grep -m 1 "collectives INFO: rdma rank $k of ${#hosts[@]} over" "$work/rank$k.log") ||
      fail "rank $k printed no 'rdma rank $k of ${#hosts[@]} over ...' line (is the worker netns_worker_rdma?)"
    [[ $line == *"provider tcp"* ]] || fail "rank $k did not use libfabric's tcp provider: $line"
    [[ $line == *"domain eth0"* ]] || fail "rank $k did not use eth0: $line"
    if [[ $k == 0 ]]; then first_info=${line#*collectives INFO: }; first_info=${first_info%%; messages*}; fi
  done
}

case_rdma_plain() {
  local -x COLLECTIVES_TRANSPORT=rdma COLLECTIVES_FABRIC_PROVIDER=tcp
  local own_hosts=1
  make_hosts 3
  start_job 10.201.0.1 150 --max-elements 1048576
  wait_job
  local k
  for ((k = 0; k < ${#hosts[@]}; k++)); do
    ((statuses[k] == 124 || statuses[k] == 137)) && fail "host $k's launcher ran past 150 s (status ${statuses[k]})"
    ((statuses[k] == 0)) || fail "host $k's launcher exited with status ${statuses[k]}"
    grep -q "^\[$k\] ok: rank $k of ${#hosts[@]}: " "$work/rank$k.log" || fail "rank $k did not report its results exact"
  done
  check_rdma_ranks
  result=$(grep -o 'ok: rank 0 .*' "$work/rank0.log" | sed 's/^ok: rank 0 of [0-9]*: //')
  pass "3 hosts over rdma, rank 0: $result; $first_info"
}

# As rank_killed, over rdma: each survivor's error is peer lost and names rank 2 first.
case_rdma_rank_killed() {
  local -x COLLECTIVES_TRANSPORT=rdma COLLECTIVES_FABRIC_PROVIDER=tcp
  local own_hosts=1
  failure_case 12 kill_worker_of_host_2
  ((statuses[2] == 137)) || fail "host 2's launcher exited with ${statuses[2]}, expected 137 (its rank was killed)"
  local k line what
  for k in 0 1; do
    ((statuses[k] == 3)) || fail "host $k's launcher exited with ${statuses[k]}, expected 3 (its rank caught collectives::error)"
    line=$(grep -m 1 "^\[$k\] collectives error (rank $k, " "$work/rank$k.log")
    [[ $line == *"(rank $k, peer lost): "* ]] || fail "rank $k's error is not peer lost: $line"
    what=${line#*): rank $k: }
    [[ $what =~ rank\ ([0-9]+) && ${BASH_REMATCH[1]} == 2 ]] || fail "rank $k's error does not name rank 2 first: $line"
  done
  pass "rank 2 killed (SIGKILL); the job ended ${elapsed} s later; errors: $(errors_of)"
}

probe
echo "netns: cases ${cases[*]}; namespaces ${prefix}-*; logs in $work"
total_start=$(now)
for current_case in "${cases[@]}"; do
  case_start=$(now)
  rm -f "$work"/*.log
  hub_stats=""
  echo "--- $current_case"
  "case_$current_case"
  for ns in "${namespaces[@]}"; do ip netns delete "$ns" 2>/dev/null; done
  namespaces=()
done
echo "=== summary (seconds per case)"
printf '  %s\n' "${summary[@]}"
echo "all ${#cases[@]} cases passed in $(seconds_since "$total_start") s"
