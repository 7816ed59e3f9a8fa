#!/usr/bin/env bash
# Runs a Python program under torchrun on this host, with torchrun's default (static)
# rendezvous on a free port, bounded by `timeout`.
# Usage: torchrun.sh RANKS PROGRAM [ARGS...]; exits 77 (skipped) without torchrun.
set -u
ranks=$1
shift
torchrun=$(command -v torchrun) || { echo "skipped: torchrun is not installed (on Debian 12: python3-torch)"; exit 77; }
output=$(mktemp)
trap 'rm -f "$output"' EXIT
# The port is free when asked for, and torchrun's store binds it a moment later: another
# process may take it meanwhile. Then torchrun says so before starting a rank, and the
# job starts again on another port.
for attempt in 1 2 3; do
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # Debian's torchrun 1.13 (on Python 3.11) needs --redirects and --tee: it cannot read their default "0".
  timeout 200 "$torchrun" --redirects 1 --tee 1 --nproc_per_node "$ranks" --master_port "$port" "$@" 2>&1 | tee "$output"
  status=${PIPESTATUS[0]}
  [ "$status" -ne 0 ] && grep -q "Address already in use" "$output" || exit "$status"
  echo "torchrun.sh: port $port was taken before torchrun's store bound it (attempt $attempt); again on another"
done
exit "$status"
