#!/usr/bin/env bash
# Tests of the collectives-run launcher with real processes.
# Usage: launcher_test.sh path/to/collectives-run CASE [path/to/shm_segment_prefix]
# (the cases are the test_* functions; shm_leftovers needs the third argument)
set -u
launcher=$1
case_name=$2
segment_prefix_tool=${3:-}
source "$(dirname "$0")/common.sh"
unset COLLECTIVES_TRANSPORT COLLECTIVES_RUN_KEEP_SHM
made_in_shm=()  # files this test put in /dev/shm, removed at exit whatever happens
at_exit 'rm -f -- "${made_in_shm[@]}"'

now() { date +%s.%N; }

# Runs the launcher (never for more than 60 s); sets status and elapsed (seconds).
run() {
  local start
  start=$(now)
  timeout 60 "$launcher" "$@" >"$out" 2>"$err"
  status=$?
  elapsed=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
}

expect_status() { [[ $status == "$1" ]] || fail "exit status $status, expected $1"; }
expect_faster_than() { awk -v e="$elapsed" -v l="$1" 'BEGIN { exit !(e < l) }' || fail "took $elapsed s, expected < $1 s"; }
expect_slower_than() { awk -v e="$elapsed" -v l="$1" 'BEGIN { exit !(e > l) }' || fail "took $elapsed s, expected > $1 s"; }
expect_line() { grep -qxF -- "$2" "$1" || fail "no line '$2' in $(basename "$1")"; }
expect_match() { grep -qE -- "$2" "$1" || fail "nothing matches /$2/ in $(basename "$1")"; }
expect_empty() { [[ ! -s $1 ]] || fail "$(basename "$1") is not empty"; }
# The file's lines, sorted, are exactly the remaining arguments (sorted).
expect_lines() {
  local file=$1
  shift
  diff <(printf '%s\n' "$@" | sort) <(sort "$file") >"$work/diff" || fail "unexpected lines in $(basename "$file"): $(cat "$work/diff")"
}

test_usage() {
  run --help
  expect_status 0
  expect_match "$out" '^usage: collectives-run'
  run -n 0 true
  expect_status 2
  expect_match "$err" '^collectives-run: -n wants a count >= 1'
  run
  expect_status 2
  expect_match "$err" 'no program to run'
  run --bogus true
  expect_status 2
  expect_match "$err" 'unknown option --bogus'
  run --grace soon true
  expect_status 2
  run -n
  expect_status 2
  expect_match "$err" '-n needs a value'
}

# mpirun's and mpiexec's spellings of the rank count, and --version.
test_rank_count_spellings() {
  local spelling
  for spelling in "-n3" "-np 3" "-np3" "--np 3" "--np=3" "--nproc=3"; do
    # shellcheck disable=SC2086 # the spelling is split into its words on purpose
    run $spelling sh -c 'echo "$RANK of $WORLD_SIZE"'
    expect_status 0
    expect_lines "$out" '[0] 0 of 3' '[1] 1 of 3' '[2] 2 of 3'
  done
  run -nx true
  expect_status 2
  expect_match "$err" "^collectives-run: -n wants a count >= 1, not 'x'"
  run --version
  expect_status 0
  expect_match "$out" '^collectives-run \(collectives\) [0-9]+\.[0-9]+\.[0-9]+$'
}

test_env_and_prefixes() {
  run -n 3 sh -c 'echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT ${#COLLECTIVES_JOB_TOKEN}"
                  echo "to stderr $RANK" >&2'
  expect_status 0
  local port
  port=$(sed -n 's/^\[0\] 0 3 0 3 0 127\.0\.0\.1 \([0-9]*\) 64$/\1/p' "$out")
  [[ -n $port ]] || fail "no port in rank 0's line"
  expect_lines "$out" "[0] 0 3 0 3 0 127.0.0.1 $port 64" "[1] 1 3 1 3 0 127.0.0.1 $port 64" "[2] 2 3 2 3 0 127.0.0.1 $port 64"
  expect_lines "$err" "[0] to stderr 0" "[1] to stderr 1" "[2] to stderr 2"

  MASTER_ADDR=10.1.2.3 MASTER_PORT=23456 run -n 1 sh -c 'echo "$MASTER_ADDR:$MASTER_PORT"'
  expect_lines "$out" "[0] 10.1.2.3:23456"
  MASTER_PORT=23456 run --master-addr 10.9.9.9 --master-port=24000 sh -c 'echo "$MASTER_ADDR:$MASTER_PORT"'
  expect_lines "$out" "[0] 10.9.9.9:24000"

  run --no-prefix -n 2 sh -c 'echo "plain $RANK"; echo "plain error $RANK" >&2'
  expect_lines "$out" "plain 0" "plain 1"
  expect_lines "$err" "plain error 0" "plain error 1"
  run -n 2 sh -c 'read line; echo "read status $?"'  # stdin is /dev/null: read meets EOF at once
  expect_lines "$out" "[0] read status 1" "[1] read status 1"
}

# The port the launcher chose stays held until the job ends, so no other job can take
# it before rank 0 listens there: a plain bind fails, a listener sharing it (as the
# library's store does, with SO_REUSEADDR) gets it.
test_master_port_held() {
  run -n 1 python3 -c '
import errno, os, socket
port = int(os.environ["MASTER_PORT"])
try:
    socket.socket().bind(("127.0.0.1", port))
    print("plain bind: got it")
except OSError as e:
    print("plain bind:", errno.errorcode[e.errno])
shared = socket.socket()
shared.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
shared.bind(("127.0.0.1", port))
shared.listen()
print("listener: got it")'
  expect_status 0
  expect_lines "$out" "[0] plain bind: EADDRINUSE" "[0] listener: got it"
}

test_job_token() {
  run -n 3 sh -c 'echo "$COLLECTIVES_JOB_TOKEN"'
  local first
  first=$(sed 's/^\[[0-9]\] //' "$out" | sort -u)
  [[ $first =~ ^[0-9a-f]{64}$ ]] || fail "ranks got tokens '$first', expected one 64-digit hex token"
  run -n 1 sh -c 'echo "$COLLECTIVES_JOB_TOKEN"'
  [[ $(sed 's/^\[0\] //' "$out") != "$first" ]] || fail "two runs got the same token"
  COLLECTIVES_JOB_TOKEN=given-token-42 run -n 2 sh -c 'echo "$COLLECTIVES_JOB_TOKEN"'
  expect_lines "$out" "[0] given-token-42" "[1] given-token-42"
}

test_multi_node() {
  local show='echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT $COLLECTIVES_JOB_TOKEN"'
  COLLECTIVES_JOB_TOKEN=tok run --nnodes 2 --node-rank 1 -n 2 --master-addr 127.0.0.1 --master-port 29999 sh -c "$show"
  expect_status 0
  expect_lines "$out" "[2] 2 4 0 2 1 127.0.0.1 29999 tok" "[3] 3 4 1 2 1 127.0.0.1 29999 tok"
  run --nnodes 2 --node-rank 1 -n 2 --master-addr 127.0.0.1 --master-port 29999 sh -c "$show"
  expect_status 2
  expect_match "$err" 'COLLECTIVES_JOB_TOKEN'
  expect_empty "$out"
  COLLECTIVES_JOB_TOKEN=tok run --nnodes 2 --node-rank 0 -n 2 --master-port 29999 sh -c "$show"
  expect_status 2
  expect_match "$err" '--master-addr'
  COLLECTIVES_JOB_TOKEN=tok run --nnodes 2 --node-rank 2 --master-addr 127.0.0.1 --master-port 29999 true
  expect_status 2
}

test_rank_exits_nonzero() {
  run --grace 1 -n 3 sh -c 'if [ "$RANK" = 1 ]; then exit 3; fi; sleep 60'
  expect_status 3
  expect_faster_than 4
  expect_match "$err" '^collectives-run: rank 1 \(pid [0-9]+\) exited with status 3; stopping the other ranks in 1 s$'
  expect_line "$err" 'collectives-run: rank 0 stopped by collectives-run (SIGTERM)'
  expect_line "$err" 'collectives-run: rank 1 exited with status 3'
  expect_line "$err" 'collectives-run: rank 2 stopped by collectives-run (SIGTERM)'
}

test_rank_killed() {
  run -n 3 sh -c 'if [ "$RANK" = 1 ]; then kill -9 $$; fi; sleep 60'  # the default grace: 3 s
  expect_status 137
  expect_faster_than 6
  expect_match "$err" '^collectives-run: rank 1 \(pid [0-9]+\) was killed by signal 9 \(Killed\); stopping the other ranks in 3 s$'
  expect_line "$err" 'collectives-run: rank 1 was killed by signal 9 (Killed)'
}

# --keep-going: a killed rank does not stop the others, which decide the status; a rank
# that exits non-zero still stops the job; a job whose every rank was killed fails.
test_keep_going() {
  run -n 3 --keep-going sh -c 'if [ "$RANK" = 1 ]; then kill -9 $$; fi; sleep 1; echo "done $RANK"'
  expect_status 0
  expect_lines "$out" '[0] done 0' '[2] done 2'
  expect_match "$err" '^collectives-run: rank 1 \(pid [0-9]+\) was killed by signal 9 \(Killed\); the others go on \(--keep-going\)$'
  expect_line "$err" 'collectives-run: rank 1 was killed by signal 9 (Killed)'
  run -n 3 --keep-going sh -c 'if [ "$RANK" = 1 ]; then kill -9 $$; fi; if [ "$RANK" = 2 ]; then sleep 0.5; exit 3; fi; sleep 60'
  expect_status 3
  expect_faster_than 6
  expect_match "$err" '^collectives-run: rank 2 \(pid [0-9]+\) exited with status 3; stopping the other ranks in 3 s$'
  run -n 2 --keep-going sh -c 'kill -9 $$'
  expect_status 137
}

# Starts the launcher in the background, waits until its N ranks have printed
# "ready", sends it SIGNAL, and waits (at most 10 s) for it to end.
signal_the_launcher() {
  local ranks=$1 signal=$2 tries=0
  shift 2
  "$launcher" -n "$ranks" "$@" >"$out" 2>"$err" &
  local pid=$! start
  until [[ $(grep -c ready "$out") == "$ranks" ]]; do
    ((++tries < 200)) || { kill -KILL "$pid"; fail "ranks never got ready"; }
    sleep 0.05
  done
  start=$(now)
  kill "-$signal" "$pid"
  tries=0
  while kill -0 "$pid" 2>/dev/null; do
    ((++tries < 200)) || { kill -KILL "$pid"; fail "launcher still running 10 s after SIG$signal"; }
    sleep 0.05
  done
  wait "$pid"
  status=$?
  elapsed=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
}

test_ctrl_c() {
  signal_the_launcher 3 INT sh -c 'trap "echo rank got INT; exit 0" INT; echo ready; while :; do sleep 0.1; done'
  expect_status 130
  expect_lines "$out" '[0] ready' '[1] ready' '[2] ready' '[0] rank got INT' '[1] rank got INT' '[2] rank got INT'
  expect_line "$err" 'collectives-run: received SIGINT; passing it on to the ranks'
}

# Ranks that ignore the SIGTERM passed on to them are killed after the grace period.
test_sigterm_to_launcher() {
  signal_the_launcher 2 TERM --grace 0.5 sh -c 'trap "" TERM; echo ready; while :; do sleep 0.1; done'
  expect_status 143
  expect_slower_than 0.4
  expect_faster_than 3
  expect_line "$err" 'collectives-run: rank 0 stopped by collectives-run (SIGKILL)'
  expect_line "$err" 'collectives-run: rank 1 stopped by collectives-run (SIGKILL)'
}

test_ignores_sigterm() {
  run --grace 1 -n 3 sh -c 'trap "" TERM; if [ "$RANK" = 0 ]; then exit 1; fi; while :; do sleep 0.1; done'
  expect_status 1
  expect_slower_than 2.5  # grace, SIGTERM, 2 s, SIGKILL
  expect_faster_than 5
  expect_line "$err" 'collectives-run: rank 1 stopped by collectives-run (SIGKILL)'
  expect_line "$err" 'collectives-run: rank 2 stopped by collectives-run (SIGKILL)'
}

test_timeout() {
  run --timeout 1 -n 2 sleep 60
  expect_status 124
  expect_faster_than 4
  expect_match "$err" '^collectives-run: the job timed out after 1 s'
  expect_line "$err" 'collectives-run: rank 0 stopped by collectives-run (SIGTERM)'
}

# Said once for the whole job, with the ranks it stopped.
test_exec_failure() {
  run -n 3 /nonexistent/program
  expect_status 127
  expect_lines "$err" 'collectives-run: cannot run /nonexistent/program: No such file or directory (ranks 0-2)'
  expect_empty "$out"
}

test_partial_and_long_lines() {
  run -n 2 sh -c 'printf "no newline $RANK"; printf "no newline either $RANK" >&2'
  expect_status 0
  expect_lines "$out" "[0] no newline 0" "[1] no newline 1"
  expect_lines "$err" "[0] no newline either 0" "[1] no newline either 1"
  # Four ranks each write three 100 KB lines of their own digit, the last one
  # without a newline: every line printed must be one rank's whole line.
  run -n 4 sh -c 'line() { head -c 100000 /dev/zero | tr "\0" "$RANK"; }; line; echo; line; echo; line'
  expect_status 0
  awk '{ rank = substr($0, 2, 1); body = substr($0, 5); rest = body; gsub(rank, "", rest)
         if ($0 !~ /^\[[0-3]\] / || length(body) != 100000 || rest != "") bad++; count[rank]++ }
       END { exit !(bad == 0 && NR == 12 && count[0] == 3 && count[1] == 3 && count[2] == 3 && count[3] == 3) }' "$out" ||
    fail "long lines were split or mixed: $(awk '{ print substr($0, 1, 8) "... " length($0) " bytes" }' "$out")"
}

test_transport_option() {
  run -n 2 --transport shm sh -c 'echo "$COLLECTIVES_TRANSPORT"'
  expect_status 0
  expect_lines "$out" "[0] shm" "[1] shm"
  COLLECTIVES_TRANSPORT=shm run --transport=tcp sh -c 'echo "$COLLECTIVES_TRANSPORT"'  # the option wins
  expect_lines "$out" "[0] tcp"
  COLLECTIVES_TRANSPORT=auto run sh -c 'echo "$COLLECTIVES_TRANSPORT"'  # inherited unchanged
  expect_lines "$out" "[0] auto"
  run sh -c 'echo "${COLLECTIVES_TRANSPORT-unset}"'
  expect_lines "$out" "[0] unset"
  run --transport udp true
  expect_status 2
  expect_match "$err" "^collectives-run: --transport wants auto, shm, tcp or rdma, not 'udp'"
  expect_empty "$out"
  run --transport '' true
  expect_status 2
}

# --bind-to core gives local rank i the i-th core the launcher may use, alone; more
# ranks than cores are refused; none (the default) leaves the affinity as it was.
# The physical cores among the cpus this shell may use: distinct (package, core id)
# pairs, from sysfs; hyperthreads of one core count once.
physical_cores() {
  local part cpu dir
  for part in $(taskset -c -p $$ | sed 's/.*: //; s/,/ /g'); do
    for cpu in $(seq "${part%-*}" "${part#*-}"); do
      dir=/sys/devices/system/cpu/cpu$cpu/topology
      echo "$(cat "$dir/physical_package_id"):$(cat "$dir/core_id")"
    done
  done | sort -u | wc -l
}

test_bind_to_core() {
  local cores first second
  cores=$(physical_cores)
  first=$(taskset -c -p $$ | sed 's/.*: //')
  run -n 1 sh -c 'taskset -c -p $$ | sed "s/.*: //"'
  expect_status 0
  expect_lines "$out" "[0] $first"
  if ((cores >= 2)); then
    run -n 2 --bind-to core sh -c 'taskset -c -p $$ | sed "s/.*: //"'
    expect_status 0
    first=$(sed -n 's/^\[0\] //p' "$out")
    second=$(sed -n 's/^\[1\] //p' "$out")
    [[ $first =~ ^[0-9]+$ && $second =~ ^[0-9]+$ && $first != "$second" ]] || fail "ranks not bound to distinct single cores: '$first' '$second'"
  fi
  run -n $((cores + 1)) --bind-to core true
  expect_status 2
  expect_match "$err" "ranks outnumber the $cores cores"
  run --bind-to socket true
  expect_status 2
  expect_match "$err" "^collectives-run: --bind-to wants core or none, not 'socket'"
}

# Segments named with the job's prefix are removed when the job ends, however it
# ends, with a warning; a segment of another job (another token) is left alone.
test_shm_leftovers() {
  [[ -x $segment_prefix_tool ]] || fail "needs the path of shm_segment_prefix as the third argument"
  local token prefix other_prefix other
  token=launcher-test-$$-$RANDOM
  prefix=$(COLLECTIVES_JOB_TOKEN=$token "$segment_prefix_tool")
  other_prefix=$(COLLECTIVES_JOB_TOKEN=$token-other "$segment_prefix_tool")
  [[ $prefix == collectives-*- && $other_prefix != "$prefix" ]] || fail "odd prefixes '$prefix', '$other_prefix'"
  other=/dev/shm/${other_prefix}1-0
  made_in_shm=("/dev/shm/$prefix"{a,b,c}-0 "$other")
  : >"$other"

  COLLECTIVES_JOB_TOKEN=$token run -n 2 sh -c 'touch /dev/shm/'"$prefix"'a-$RANK'
  expect_status 0
  [[ ! -e /dev/shm/${prefix}a-0 && ! -e /dev/shm/${prefix}a-1 ]] || fail "the job's segments are still there"
  [[ -e $other ]] || fail "another job's segment was removed"
  expect_line "$err" "collectives-run: warning: removed 2 shared-memory segments the job left (/dev/shm/$prefix*); only a rank that ends during start-up leaves them"

  # A rank killed, the others stopped: cleaned up all the same.
  COLLECTIVES_JOB_TOKEN=$token run --grace 0.2 -n 2 sh -c 'touch /dev/shm/'"$prefix"'b-$RANK
    if [ "$RANK" = 1 ]; then until [ -e /dev/shm/'"$prefix"'b-0 ]; do sleep 0.01; done; kill -9 $$; fi; sleep 60'
  expect_status 137
  [[ ! -e /dev/shm/${prefix}b-0 && ! -e /dev/shm/${prefix}b-1 ]] || fail "segments left after a killed rank"
  expect_match "$err" '^collectives-run: warning: removed 2 shared-memory segments'

  # COLLECTIVES_RUN_KEEP_SHM: kept (for tests that check the library), and said so.
  COLLECTIVES_JOB_TOKEN=$token COLLECTIVES_RUN_KEEP_SHM=1 run sh -c 'touch /dev/shm/'"$prefix"'c-0'
  expect_status 0
  [[ -e /dev/shm/${prefix}c-0 ]] || fail "COLLECTIVES_RUN_KEEP_SHM=1 did not keep the segment"
  expect_line "$err" "collectives-run: warning: the job left 1 shared-memory segment (/dev/shm/$prefix*); kept (COLLECTIVES_RUN_KEEP_SHM)"
  [[ -e $other ]] || fail "another job's segment was removed"

  # A value the flag does not take stops the launch before any rank starts.
  COLLECTIVES_RUN_KEEP_SHM=maybe run true
  expect_status 2
  expect_match "$err" '^collectives-run: COLLECTIVES_RUN_KEEP_SHM=maybe is not a flag \(expected 1, on, true or yes; 0, off, false or no\)'

  # A job that leaves nothing says nothing.
  COLLECTIVES_JOB_TOKEN=$token-clean run -n 2 true
  expect_status 0
  expect_empty "$err"
}

test_all_succeed() {
  run -n 4 sh -c 'echo "hello from $RANK"'
  expect_status 0
  expect_lines "$out" "[0] hello from 0" "[1] hello from 1" "[2] hello from 2" "[3] hello from 3"
  expect_empty "$err"
  run -n 2 true
  expect_status 0
  expect_empty "$out"
  expect_empty "$err"
}

run_case
