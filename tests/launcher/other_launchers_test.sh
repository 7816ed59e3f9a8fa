#!/usr/bin/env bash
# A program of the library under the launchers people already use, with the commands
# they type and nothing exported: Hydra's mpiexec (MPICH), Open MPI's mpirun and Slurm's
# srun (a one-node cluster of this host, started by this script). The program checks its
# result against a serial sum and exits non-zero when it differs.
# Usage: other_launchers_test.sh path/to/01_ring_all_reduce CASE
# Exits 77 (a skip) when the launcher of CASE is not installed or cannot run here.
set -uo pipefail

program=$1
case_name=$2
source "$(dirname "$0")/common.sh"
daemons=()  # pid files of what this script started

# Whether process $1 is there and not a zombie.
alive() { [[ -r /proc/$1/stat ]] && [[ $(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) != Z ]]; }

# The daemons, last started first: SIGTERM, then SIGKILL after 5 s.
stop_daemons() {
  local i pid tries
  for (( i = ${#daemons[@]} - 1; i >= 0; i-- )); do
    [[ -s ${daemons[i]} ]] || continue
    pid=$(cat "${daemons[i]}")
    kill "$pid" 2>/dev/null
    for tries in $(seq 50); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null
  done
}
at_exit stop_daemons

# Runs the launcher command (at most 60 s); status is its exit status.
run() {
  timeout 60 "$@" >"$out" 2>"$err"
  status=$?
}

# A TCP port no socket uses now (and not $1), below the kernel's range of ephemeral
# ports: there a connection of a test running beside this one could take it before a
# daemon binds it, and slurmctld then retries its bind while sinfo waits.
free_port() {
  local port first=20000 count low
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range
  count=$(( low - first ))
  (( count >= 1000 )) || { first=61000; count=4000; }  # an unusual range: above the usual one
  while :; do
    port=$(( first + RANDOM % count ))
    [[ $port != "${1:-}" ]] && ! ss -Htan "sport = :$port" | grep -q . && break
  done
  echo "$port"
}

private_directories() { find /dev/shm "${TMPDIR:-/tmp}" -maxdepth 1 -name "collectives-$(id -u)-*" 2>/dev/null | sort; }

# A job of N ranks checked its result, printed its summary once, warned of nothing (or,
# with a third argument, only once of the public token) and left no private directory.
expect_good_job() {
  local ranks=$1 before=$2 token_warning=${3:-}
  [[ $status == 0 ]] || fail "exit status $status"
  grep -qx "ring all-reduce of 1003 floats over $ranks ranks, $(( 2 * (ranks - 1) )) steps" "$out" ||
    fail "not one job of $ranks ranks"
  [[ $(grep -c 'on every rank' "$out") == 1 ]] || fail "the summary is not printed exactly once"
  if [[ -n $token_warning ]]; then
    [[ $(wc -l <"$err") == 1 ]] && grep -q '^collectives WARN: COLLECTIVES_JOB_TOKEN is not set' "$err" ||
      fail "stderr is not the one warning of the public token"
  else
    [[ ! -s $err ]] || fail "stderr is not empty"
  fi
  [[ $(private_directories) == "$before" ]] || fail "left a directory: $(private_directories)"
}

hydra() {
  command -v mpiexec.hydra >/dev/null || skip "mpiexec.hydra not found (Debian package mpich)"
  local ranks=$1 before
  before=$(private_directories)
  run mpiexec.hydra -n "$ranks" "$program"
  expect_good_job "$ranks" "$before"
}

open_mpi() {
  command -v mpirun.openmpi >/dev/null || skip "mpirun.openmpi not found (Debian package openmpi-bin)"
  local ranks=$1 before root=()
  [[ $(id -u) == 0 ]] && root=(--allow-run-as-root)
  before=$(private_directories)
  run mpirun.openmpi "${root[@]}" --oversubscribe -n "$ranks" "$program"
  expect_good_job "$ranks" "$before"
}

# A Slurm cluster of one node, this host, with its own munge, in $work; as root, since
# slurmd starts the tasks.
start_slurm() {
  [[ $(id -u) == 0 ]] || skip "a Slurm cluster of this host needs root (slurmd runs the tasks)"
  local tool
  for tool in munged slurmctld slurmd srun sinfo; do
    command -v "$tool" >/dev/null || skip "$tool not found (Debian packages munge, slurmctld, slurmd, slurm-client)"
  done
  local host ctld_port slurmd_port
  host=$(hostname)
  ctld_port=$(free_port)
  slurmd_port=$(free_port "$ctld_port")
  dd if=/dev/urandom of="$work/munge.key" bs=1024 count=1 status=none && chmod 600 "$work/munge.key"
  munged -f --socket="$work/munge.sock" --key-file="$work/munge.key" --log-file="$work/munged.log" \
    --pid-file="$work/munged.pid" --seed-file="$work/munged.seed" || skip "munged does not start: $(tail -n 3 "$work/munged.log")"
  daemons+=("$work/munged.pid")
  mkdir -p "$work/state" "$work/spool"
  cat >"$work/slurm.conf" <<EOF
ClusterName=collectives
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge.sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=10 State=UP OverSubscribe=FORCE
EOF
  export SLURM_CONF=$work/slurm.conf
  slurmctld -c -i || skip "slurmctld does not start: $(tail -n 3 "$work/slurmctld.log")"
  daemons+=("$work/slurmctld.pid")
  slurmd || skip "slurmd does not start: $(tail -n 3 "$work/slurmd.log")"
  daemons+=("$work/slurmd.pid")
  # Bounded by the clock, not by a number of tries: each sinfo may wait up to 2 s on a
  # slurmctld that does not answer.
  local deadline=$(( SECONDS + 15 ))
  while (( SECONDS < deadline )); do
    [[ $(timeout 2 sinfo -h -o %t 2>/dev/null) == idle ]] && return
    sleep 0.1
  done
  skip "the Slurm node did not become idle within 15 s: $(timeout 2 sinfo 2>&1 | tail -n 1); $(tail -n 3 "$work/slurmd.log")"
}

slurm() {
  local ranks=$1 before
  start_slurm
  before=$(private_directories)
  run srun -n "$ranks" "$program"
  expect_good_job "$ranks" "$before"
}

# The TCP store at a derived place: the port from the job id (MASTER_ADDR given), then
# the address from the node list (MASTER_PORT given; the node's name must resolve).
# Without a token, rank 0 alone says that the public one is used.
test_slurm_tcp() {
  local before
  start_slurm
  before=$(private_directories)
  run env MASTER_ADDR=127.0.0.1 srun -n 3 "$program"
  expect_good_job 3 "$before" token_warning
  getent hosts "$(hostname)" >/dev/null || skip "this host's name $(hostname) does not resolve"
  run env MASTER_PORT="$(free_port)" COLLECTIVES_JOB_TOKEN="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
    srun -n 3 "$program"
  expect_good_job 3 "$before"
}

test_hydra_4() { hydra 4; }
test_hydra_3() { hydra 3; }
test_open_mpi_4() { open_mpi 4; }
test_open_mpi_3() { open_mpi 3; }
test_slurm_4() { slurm 4; }
test_slurm_3() { slurm 3; }

run_case
