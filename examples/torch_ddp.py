"""Data-parallel training with torch's DistributedDataParallel over the backend
"collectives", beside the same training over Gloo and in one process.

    PYTHONPATH=build/python torchrun --nproc_per_node 4 examples/torch_ddp.py [steps]

Every rank trains two copies of one small model, each under DDP: one over this
library, one over a Gloo group of the same ranks. Rank r takes its share of each batch.
The result is checked against one process training on the whole batch (the serial
reference): DDP averages the ranks' gradients, and with equal shares that average is
the whole batch's gradient. Exits 1 if either copy strays from it.
"""
import datetime
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import collectives_torch  # noqa: F401  (registers the backend "collectives")

BATCH = 48  # samples per step, shared out over the ranks (48 splits evenly over 1 to 4, 6, 8)
FEATURES, HIDDEN = 32, 64


def model():
    torch.manual_seed(0)  # the same initial weights on every rank and in the reference
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1))


def batch(step):
    """The whole batch of a step: the same on every rank, made from the step's number."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, FEATURES, generator=g)
    y = x[:, :4].sum(1, keepdim=True).sin() + 0.1 * torch.randn(BATCH, 1, generator=g)
    return x, y


def train(net, steps, share=slice(None)):
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x, y = batch(step)
        loss = torch.nn.functional.mse_loss(net(x[share]), y[share])
        optimizer.zero_grad()
        loss.backward()  # under DDP: the gradients' all_reduce overlaps the backward pass
        optimizer.step()
    return loss.item()


def largest_difference(a, b):
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    dist.init_process_group("collectives", timeout=datetime.timedelta(seconds=60))
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    share = slice(rank * BATCH // size, (rank + 1) * BATCH // size)

    ours = DistributedDataParallel(model())  # over the default group: "collectives"
    theirs = DistributedDataParallel(model(), process_group=gloo)
    loss = train(ours, steps, share)
    train(theirs, steps, share)
    serial = model()
    train(serial, steps)

    tolerance = 1e-5  # float sums in another order
    off_serial = largest_difference(ours.module, serial)
    off_gloo = largest_difference(ours.module, theirs.module)
    gloo_off_serial = largest_difference(theirs.module, serial)
    ok = torch.tensor([int(max(off_serial, off_gloo) <= tolerance)])
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if rank == 0:
        print(f"DDP over collectives, {size} ranks, {steps} steps of {BATCH} samples: loss {loss:.5f} (rank 0's share)")
        print(f"  largest parameter difference: {off_serial:.2e} from one process, {off_gloo:.2e} from DDP over Gloo "
              f"(Gloo from one process: {gloo_off_serial:.2e}); tolerance {tolerance:.0e}")
        print("  every rank matches" if ok.item() else "  FAILED: a rank strays")
    dist.destroy_process_group()
    sys.exit(0 if ok.item() else 1)


if __name__ == "__main__":
    main()
