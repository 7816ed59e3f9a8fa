#!/usr/bin/env bash
# all_reduce (float sum) on this host, this library against Open MPI, same sizes and
# rank counts, runs alternating, medians of ROUNDS runs (each run's figure is itself
# the median of its iterations). TRANSPORT picks what both use:
#   tcp (default)  loopback TCP: ours over tcp, Open MPI's `--mca btl self,tcp`
#   shm            shared memory: ours over shm, Open MPI's `--mca btl self,vader`
# A memcpy bandwidth line, measured in the same run, gives the host's copy limit.
#
# usage: bench/compare_all_reduce.sh [bytes ...]     (default: 8 and 67108864)
# env:   TRANSPORT (tcp), ROUNDS (5), ITERATIONS (20), RANKS ("2 4"), BUILD_DIR (build-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
transport=${TRANSPORT:-tcp}
case $transport in
  tcp) mpi_btl=self,tcp ;;
  shm) mpi_btl=self,vader ;;
  *) echo "compare_all_reduce.sh: TRANSPORT=$transport is not tcp or shm" >&2; exit 2 ;;
esac
scripts/install-deps.sh
missing=()
for p in openmpi-bin libopenmpi-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
build=${BUILD_DIR:-build-bench}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCOLLECTIVES_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target all_reduce_time memcpy_bandwidth collectives-run >/dev/null
mpicxx -O2 bench/mpi_all_reduce_time.cpp -o "$build/bench/mpi_all_reduce_time"

sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(8 67108864)
iterations=${ITERATIONS:-20}
results=$(mktemp)
trap 'rm -f "$results"' EXIT
mpi_flags=(--allow-run-as-root --oversubscribe --mca btl "$mpi_btl")
echo "transport: collectives over $transport, Open MPI with --mca btl $mpi_btl"
"$build/bench/memcpy_bandwidth"
for ranks in ${RANKS:-2 4}; do
  for round in $(seq "${ROUNDS:-5}"); do
    "$build/tools/collectives-run" -n "$ranks" --transport "$transport" --no-prefix --timeout 600 \
      "$build/bench/all_reduce_time" "$iterations" "${sizes[@]}" >>"$results"
    mpirun "${mpi_flags[@]}" -n "$ranks" "$build/bench/mpi_all_reduce_time" "$iterations" "${sizes[@]}" \
      2>/dev/null | grep '^openmpi' >>"$results"
  done
done

# Lines: who ranks bytes time_us busbw_GBps. Table of medians, and their ratio.
echo "ranks  bytes      collectives(us)  openmpi(us)  time ratio  busbw collectives  busbw openmpi  (GB/s)"
awk '
  { key = $2 " " $3; t[$1, key, ++n[$1, key]] = $4; b[$1, key, n[$1, key]] = $5; keys[key] = 1 }
  function median(arr, who, key,   i, m, v, tmp) {
    m = n[who, key]; for (i = 1; i <= m; i++) v[i] = arr[who, key, i]
    for (i = 2; i <= m; i++) { tmp = v[i]; j = i - 1; while (j > 0 && v[j] > tmp) { v[j + 1] = v[j]; j-- } v[j + 1] = tmp }
    return (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
  }
  END {
    for (key in keys) {
      split(key, k, " ")
      ours = median(t, "collectives", key); theirs = median(t, "openmpi", key)
      printf "%-6s %-10s %15.1f %12.1f %11.2fx %18.3f %14.3f\n", k[1], k[2], ours, theirs, theirs / ours,
             median(b, "collectives", key), median(b, "openmpi", key)
    }
  }' "$results" | sort -n -k1 -k2
echo "time ratio = Open MPI's time / ours (above 1: we are faster)"
