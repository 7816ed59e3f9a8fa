"""The collectives library as a torch.distributed backend.

    import collectives_torch  # registers the backend "collectives"
    torch.distributed.init_process_group("collectives")

See docs/pytorch.md.
"""
import torch.distributed as _dist

from ._C import ProcessGroupCollectives, create_process_group

__all__ = ["ProcessGroupCollectives", "create_process_group"]

if not hasattr(_dist.Backend, "COLLECTIVES"):
    _dist.Backend.register_backend("collectives", create_process_group)
