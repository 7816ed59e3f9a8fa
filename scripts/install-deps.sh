#!/usr/bin/env bash
# Installs the Debian 12 packages the build and the tests need, if any is missing
# (with --build-only, those of the build alone).
set -euo pipefail
packages=(g++ clang cmake make ninja-build doctest-dev libboost-dev libssl-dev iproute2 libbenchmark-dev pkgconf groff-base libhwloc-dev hwloc-nox libfabric-dev libfabric-bin)
# Installed without what they recommend:
# - the launchers that tests/launcher/other_launchers_test.sh runs programs under:
#   Hydra's mpiexec (mpich), Open MPI's mpirun and a one-node Slurm cluster; mpich
#   leaves mpirun and mpicc to Open MPI (its alternatives rank lower), while the tests
#   name mpiexec.hydra and mpirun.openmpi explicitly either way;
# - Open MPI's development files, for the perf programs' Open MPI twin: with
#   openmpi-bin's mpicxx and no headers, CMake's FindMPI stops the configure;
# - PyTorch, for the tests under torchrun and against its TCPStore: about 130 MB to
#   download and 40 s to install without its recommends (media and GPU libraries);
#   with libtorch-dev and pybind11-dev, the torch.distributed backend (python/) builds;
# - matplotlib for Debian's /usr/bin/python3, which collectives-sim --plot runs (its
#   test, collectives_sim_plot) and bench/compare draws with.
packages_without_recommends=(mpich openmpi-bin libopenmpi-dev munge slurmctld slurmd slurm-client python3-torch
                             libtorch-dev pybind11-dev python3-matplotlib)
# --build-only: what building needs, not the launchers and PyTorch that only tests use
# (the torch backend is built where its packages are found).
[ "${1:-}" = "--build-only" ] && packages_without_recommends=()
missing=() missing_lean=()
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
for p in "${packages_without_recommends[@]+"${packages_without_recommends[@]}"}"; do installed "$p" || missing_lean+=("$p"); done
[ ${#missing[@]} -eq 0 ] && [ ${#missing_lean[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing: ${missing[*]} ${missing_lean[*]}"
$sudo apt-get update -qq
[ ${#missing[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
[ ${#missing_lean[@]} -eq 0 ] ||
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing_lean[@]}"
