#!/usr/bin/env bash
# Installs the Debian 12 packages the build and the tests need, if any is missing.
set -euo pipefail
packages=(g++ clang cmake make doctest-dev libboost-dev libssl-dev iproute2 libbenchmark-dev pkgconf groff-base)
# PyTorch, for the tests under torchrun and against its TCPStore: about 130 MB to
# download and 40 s to install without its recommends (media and GPU libraries).
packages_without_recommends=(python3-torch)
missing() {
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
mapfile -t missing_packages < <(missing "${packages[@]}")
mapfile -t missing_lean < <(missing "${packages_without_recommends[@]}")
[ ${#missing_packages[@]} -eq 0 ] && [ ${#missing_lean[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing: ${missing_packages[*]} ${missing_lean[*]}"
$sudo apt-get update -qq
if [ ${#missing_packages[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing_packages[@]}"
fi
if [ ${#missing_lean[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing_lean[@]}"
fi
