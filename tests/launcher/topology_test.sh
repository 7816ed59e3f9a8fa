#!/usr/bin/env bash
# The machine's topology as collectives-run --topology prints it and as a rank logs it
# at COLLECTIVES_DEBUG=INFO, against references independent of the library: nproc,
# /sys/devices/system/node and hwloc-calc (hwloc-nox).
# Usage: topology_test.sh path/to/collectives-run tools
#        topology_test.sh path/to/collectives-run info_log path/to/a/program
# The tools case exits 77 (skipped), after its other checks, when hwloc-calc is absent.
set -u
launcher=$1
case_name=$2
program=${3:-}
source "$(dirname "$0")/common.sh"
unset COLLECTIVES_TRANSPORT COLLECTIVES_DEBUG

# How many cpus a list such as "0-3,8" names.
count_cpus() {
  local part total=0
  for part in ${1//,/ }; do total=$((total + ${part#*-} - ${part%-*} + 1)); done
  echo "$total"
}

summary_line='^topology \(([^)]*)\): ([0-9]+) packages?, ([0-9]+) NUMA nodes?, ([0-9]+) cores?, ([0-9]+) hardware threads?; bound to cpus ([0-9,-]+)$'

test_tools() {
  timeout 30 "$launcher" --topology >"$out" 2>"$err" || fail "collectives-run --topology exited with status $?"
  [[ $(head -n 1 "$out") =~ $summary_line ]] || fail "the first line is not a summary"
  local source=${BASH_REMATCH[1]} numa=${BASH_REMATCH[3]} cores=${BASH_REMATCH[4]} threads=${BASH_REMATCH[5]}
  local bound=${BASH_REMATCH[6]}
  echo "collectives-run --topology: $(head -n 1 "$out")"

  [[ $(count_cpus "$bound") == $(nproc) ]] || fail "bound to $bound, but nproc says $(nproc) cpus"
  local sys_nodes
  sys_nodes=$(find /sys/devices/system/node -maxdepth 1 -name 'node[0-9]*' | wc -l)
  ((sys_nodes == 0)) && sys_nodes=1  # a kernel without NUMA: one node
  [[ $numa == "$sys_nodes" ]] || fail "$numa NUMA nodes, /sys/devices/system/node has $sys_nodes"
  [[ $(grep -c '^NUMA node [0-9]*: cpus ' "$out") == "$numa" ]] || fail "not one line per NUMA node"
  ((threads >= cores && cores >= 1)) || fail "$cores cores and $threads hardware threads"

  # --bind-to core: one cpu per local rank, each on a core of its own.
  local ranks=$((cores < 2 ? cores : 2))
  timeout 30 "$launcher" --topology -n "$ranks" --bind-to core >"$out" 2>"$err" || fail "--topology -n $ranks --bind-to core failed"
  [[ $(grep -c '^local rank [0-9]*: cpu [0-9]*$' "$out") == "$ranks" ]] || fail "not one cpu line per local rank"
  [[ $(sed -n 's/^local rank [0-9]*: cpu //p' "$out" | sort -u | wc -l) == "$ranks" ]] || fail "two local ranks share a cpu"
  timeout 30 "$launcher" --topology -n $((cores + 1)) --bind-to core >"$out" 2>"$err"
  [[ $? == 2 ]] || fail "more ranks than cores is not refused with status 2"
  grep -q "ranks outnumber the $cores cores" "$err" || fail "no 'ranks outnumber the $cores cores'"

  if ! command -v hwloc-calc >/dev/null; then
    skip "hwloc-calc not found (Debian package hwloc-nox); nproc and sysfs agree"
  fi
  local hwloc_cores hwloc_threads
  hwloc_cores=$(hwloc-calc --number-of core all) || fail "hwloc-calc failed"
  hwloc_threads=$(hwloc-calc --number-of pu all) || fail "hwloc-calc failed"
  [[ $cores == "$hwloc_cores" ]] || fail "$cores cores ($source), hwloc-calc counts $hwloc_cores"
  [[ $threads == "$hwloc_threads" ]] || fail "$threads hardware threads ($source), hwloc-calc counts $hwloc_threads"
  echo "hwloc-calc agrees: $hwloc_cores cores, $hwloc_threads hardware threads"
}

# A job of 2 ranks at COLLECTIVES_DEBUG=INFO: each logs the topology line once.
test_info_log() {
  [[ -x $program ]] || fail "needs a program as the third argument"
  COLLECTIVES_DEBUG=INFO timeout 90 "$launcher" -n 2 "$program" >"$out" 2>"$err" || fail "the job failed (status $?)"
  local rank line
  for rank in 0 1; do
    [[ $(grep -c "^\[$rank\] collectives INFO: rank $rank: topology (" "$err") == 1 ]] ||
      fail "rank $rank did not log its topology line exactly once"
    line=$(sed -n "s/^\[$rank\] collectives INFO: rank $rank: //p" "$err" | grep '^topology (')
    [[ $line =~ $summary_line ]] || fail "rank $rank's topology line is not a summary: $line"
  done
  echo "logged: $line"
}

run_case
