"""PyTorch's own distributed tests (torch.testing._internal.distributed.distributed_test,
as Debian's python3-torch ships it) pointed at the backend "collectives", as PyTorch's
test_distributed_spawn.py points them at Gloo: every test spawns WORLD_SIZE processes
that meet through a file store.

    PYTHONPATH=build/python WORLD_SIZE=2 /usr/bin/python3 tests/torch/pytorch_suite.py [-k PATTERN] [-v]

Not a ctest test (the whole suite takes about 14 minutes on 2 cores): the
results, and why each failing test fails, are in docs/pytorch.md.
"""
import os
import sys
import tempfile

os.environ.setdefault("BACKEND", "collectives")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="collectives-torch-suite-"))

# torch's test helpers import expecttest, a small PyPI module Debian does not package;
# the distributed tests use none of it but its TestCase base.
if "expecttest" not in sys.modules:
    import types
    import unittest

    sys.modules["expecttest"] = types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False)

import collectives_torch  # noqa: E402,F401  (registers the backend)
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402
from torch.testing._internal.common_utils import run_tests  # noqa: E402

# What the suite asks of a backend before it runs a test; "collectives" has them
# (groups, DDP), as Gloo does. "cpu barrier", "reduce" and the rest need no entry.
if os.environ["BACKEND"] == "collectives":
    for feature in ("plugin", "subgroup", "ddp"):
        DistTestCases.backend_feature[feature].add("collectives")
    DistTestCases.skip_collective["sendrecv anysource"].add("collectives")
    DistTestCases.skip_collective["allgather_coalesced"].add("collectives")

from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402

# Each test process turns on DDP's ReplicatedTensor mode, which imports
# torch.distributed._shard: on Python 3.11 torch 1.13's dataclasses there fail to
# import (a mutable default), whatever the backend. Left off, DDP runs as it does
# outside the suite. BACKEND=gloo runs the suite the same way, for comparison.
torch_ddp_utils = sys.modules.get("torch.nn.parallel._replicated_tensor_ddp_utils")
if torch_ddp_utils is None:
    import torch.nn.parallel._replicated_tensor_ddp_utils as torch_ddp_utils
torch_ddp_utils._set_ddp_with_replicated_tensor = lambda enabled: None


class TestCollectivesBackend(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


# With UNSKIP=1, the tests skipped only because they name the backends they were written
# for (and whose operations are CPU operations this backend has) run too; docs/pytorch.md
# lists what they gave.
UNSKIPPED_REASONS = (
    "Test requires backend to be one of",
    "Only MPI supports CPU all_to_all_single",
    "Only MPI supports all_to_all",
    "get_future is only supported on",
    "Only gloo backend supports timeouts",
    "GLOO Batch Send Recv CPU",
    "Only Gloo backend support sparse all reduce",
)
def unskip(test):
    """Clears the skip marks of the allowed reasons, on the test and on the functions it wraps
    (torch's skips mark the function itself; the wrappers above it copy the mark)."""
    while test is not None:
        why = getattr(test, "__unittest_skip_why__", "")
        only_nccl = why.startswith("Test requires backend to be one of") and "gloo" not in why  # a set, in any order
        if why.startswith(UNSKIPPED_REASONS) and not only_nccl:
            test.__unittest_skip__ = False
        test = getattr(test, "__wrapped__", None)


if os.environ.get("UNSKIP") == "1":
    for name in dir(TestCollectivesBackend):
        if name.startswith("test_"):
            unskip(getattr(TestCollectivesBackend, name))


if __name__ == "__main__":
    run_tests()
