#!/usr/bin/env bash
# Runs a test against PyTorch's own TCPStore: finds a python3 that imports
# torch.distributed (Debian's python3-torch), exports it as TORCH_PYTHON and runs the
# command; exits 77, which ctest reports as skipped, when there is none.
for candidate in python3 /usr/bin/python3; do
  python=$(command -v "$candidate") || continue
  if timeout 120 "$python" -c 'import torch.distributed' >/dev/null 2>&1; then
    TORCH_PYTHON=$python exec "$@"
  fi
done
echo "SKIPPED: no python3 here imports torch.distributed (on Debian 12: apt-get install python3-torch)"
exit 77
