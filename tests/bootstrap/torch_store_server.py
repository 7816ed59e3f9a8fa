# Serves PyTorch's own TCPStore on a free loopback port for c10d_store_test: prints the
# port, then serves until its standard input closes (so it never outlives the test).
import datetime
import sys

import torch.distributed as dist

store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=60))
store.set("set-by-torch", "hello from torch")
store.add("counter-from-torch", 41)
print(store.port, flush=True)
sys.stdin.read()
