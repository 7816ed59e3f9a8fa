#!/usr/bin/env bash
# Runs a command (a collectives-run job) with a fresh job token, then fails if the job
# left anything in /dev/shm under that token's segment prefix: the shm transport
# promises that a job leaves nothing there, however its ranks end after start-up.
#
# usage: no_leftovers.sh path/to/shm_segment_prefix command [args...]
#
# The launcher would remove such leftovers itself and only warn; COLLECTIVES_RUN_KEEP_SHM
# tells it to keep them, so this check sees what the library left, not what the
# launcher tidied. Each run has its own token and so its own prefix: runs in parallel
# (ctest -j) never see each other's segments.
set -u
prefix_tool=$1
shift
COLLECTIVES_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export COLLECTIVES_JOB_TOKEN
export COLLECTIVES_RUN_KEEP_SHM=1
prefix=$("$prefix_tool") || exit 1

"$@"
status=$?

shopt -s nullglob
left=(/dev/shm/"$prefix"*)
if ((${#left[@]} > 0)); then
  echo "no_leftovers: the job left ${#left[@]} shared-memory segment(s) in /dev/shm: ${left[*]}" >&2
  rm -f -- "${left[@]}"
  ((status == 0)) && status=1
fi
exit "$status"
