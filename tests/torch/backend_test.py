"""The torch.distributed backend "collectives" against serial references.

Under torchrun (any number of ranks):
    torchrun --standalone --nproc_per_node 3 backend_test.py [operations | timeout | never_joins]
As plain processes it starts itself:
    backend_test.py killed_rank 3

Every rank makes every rank's inputs from (rank, case) and computes the expected result
serially, in float64 or exact integers, so nothing is compared with the backend itself.
A rank exits 0 only when every check held; a failed check raises.
"""
import datetime
import functools
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
import zlib

import torch
import torch.distributed as dist

import collectives_torch  # noqa: F401  (registers the backend)

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTEGERS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
DTYPES = FLOATS + INTEGERS + [torch.bool]
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]  # names of R's members
COUNTS = [0, 1, 7, 1001]


def defined(op, dtype):
    if op in ("BAND", "BOR", "BXOR"):
        return dtype not in FLOATS
    return not (op == "AVG" and dtype == torch.bool)


def inputs(rank, count, dtype, op="SUM", case=0):
    """Small values whose sums and products are exact in every dtype."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{rank} {count} {dtype} {op} {case}".encode()))
    if dtype == torch.bool:
        return torch.randint(0, 2, (count,), generator=g).bool()
    if op == "PRODUCT":
        choices = torch.tensor([1, 2] if dtype == torch.uint8 else [-2, -1, 1, 2])
        return choices[torch.randint(0, len(choices), (count,), generator=g)].to(dtype)
    low = 0 if dtype == torch.uint8 else -3
    return torch.randint(low, 4, (count,), generator=g).to(dtype)


def reduced(parts, op, dtype):
    """The serial reduction of every rank's part, in the part's dtype."""
    if dtype == torch.bool:
        ints = torch.stack([p.to(torch.int64) for p in parts])
        total = {"SUM": ints.max(0).values, "MAX": ints.max(0).values, "BOR": ints.max(0).values,
                 "PRODUCT": ints.min(0).values, "MIN": ints.min(0).values, "BAND": ints.min(0).values,
                 "BXOR": ints.sum(0) % 2}[op]
        return total.bool()
    exact = torch.stack([p.to(torch.float64 if dtype in FLOATS else torch.int64) for p in parts])
    if op == "SUM":
        return exact.sum(0).to(dtype)
    if op == "AVG":
        if dtype in FLOATS:  # the exact sum, divided as the op divides: in the dtype, or in float for 16 bits
            wide = dtype if dtype in (torch.float32, torch.float64) else torch.float32
            return (exact.sum(0).to(wide) / len(parts)).to(dtype)
        return torch.div(exact.sum(0), len(parts), rounding_mode="trunc").to(dtype)
    if op == "PRODUCT":
        return exact.prod(0).to(dtype)
    if op == "MIN":
        return exact.min(0).values.to(dtype)
    if op == "MAX":
        return exact.max(0).values.to(dtype)
    bitwise = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}[op]
    return functools.reduce(bitwise, [p.to(torch.int64) for p in parts]).to(dtype)


def expect_equal(got, want, what):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        raise AssertionError(f"{what}: got {got.flatten()[:8]} ({got.dtype}, {tuple(got.shape)}), "
                             f"expected {want.flatten()[:8]} ({want.dtype}, {tuple(want.shape)})")


def expect_error(words, action, what):
    try:
        action()
    except RuntimeError as e:
        if all(w in str(e) for w in words):
            return str(e)
        raise AssertionError(f"{what}: the error does not say {words}: {e}")
    raise AssertionError(f"{what}: no error")


def check_reductions(rank, size):
    for dtype in DTYPES:
        for op in OPS:
            if not defined(op, dtype):
                t = inputs(rank, 3, dtype)
                expect_error(["not defined on"], lambda: dist.all_reduce(t, op=getattr(R, op)), f"all_reduce {op} of {dtype}")
                continue
            for count in COUNTS:
                parts = [inputs(r, count, dtype, op) for r in range(size)]
                what = f"{op} of {count} {dtype}"
                t = parts[rank].clone()
                dist.all_reduce(t, op=getattr(R, op))
                expect_equal(t, reduced(parts, op, dtype), "all_reduce " + what)
                root = count % size
                t = parts[rank].clone()
                dist.reduce(t, root, op=getattr(R, op))
                if rank == root:
                    expect_equal(t, reduced(parts, op, dtype), f"reduce to {root}, " + what)
                # reduce_scatter: rank r's list holds one part per rank
                lists = [[inputs(r, count, dtype, op, case=1 + j) for j in range(size)] for r in range(size)]
                out = torch.empty(count, dtype=dtype)
                dist.reduce_scatter(out, [p.clone() for p in lists[rank]], op=getattr(R, op))
                expect_equal(out, reduced([lists[r][rank] for r in range(size)], op, dtype), "reduce_scatter " + what)
                out = torch.empty(count, dtype=dtype)
                dist.reduce_scatter_tensor(out, torch.cat(lists[rank]), op=getattr(R, op))
                expect_equal(out, reduced([lists[r][rank] for r in range(size)], op, dtype),
                             "_reduce_scatter_base " + what)


def check_coalesced(rank, size):
    sizes = [3, 0, 1001, 5]
    parts = [[inputs(r, n, torch.float32, case=i) for i, n in enumerate(sizes)] for r in range(size)]
    mine = [p.clone() for p in parts[rank]]
    with warnings.catch_warnings():  # torch 1.13 says it will deprecate the call
        warnings.simplefilter("ignore")
        dist.all_reduce_coalesced(mine)
    for i in range(len(sizes)):
        expect_equal(mine[i], reduced([parts[r][i] for r in range(size)], "SUM", torch.float32), f"coalesced part {i}")


def check_movement(rank, size):
    for dtype in [torch.float32, torch.bfloat16, torch.int64, torch.bool]:
        for count in COUNTS:
            what = f"{count} {dtype}"
            for root in range(size):
                t = inputs(rank, count, dtype)
                dist.broadcast(t, root)
                expect_equal(t, inputs(root, count, dtype), f"broadcast from {root} of " + what)

                gathered = [torch.empty(count, dtype=dtype) for _ in range(size)] if rank == root else None
                dist.gather(inputs(rank, count, dtype), gathered, dst=root)
                if rank == root:
                    for r in range(size):
                        expect_equal(gathered[r], inputs(r, count, dtype), f"gather to {root}, part {r} of " + what)

                out = torch.empty(count, dtype=dtype)
                parts = [inputs(root, count, dtype, case=1 + r) for r in range(size)]
                dist.scatter(out, parts if rank == root else None, src=root)
                expect_equal(out, inputs(root, count, dtype, case=1 + rank), f"scatter from {root} of " + what)

            outs = [torch.empty(count, dtype=dtype) for _ in range(size)]
            dist.all_gather(outs, inputs(rank, count, dtype))
            for r in range(size):
                expect_equal(outs[r], inputs(r, count, dtype), f"all_gather part {r} of " + what)
            flat = torch.empty(size * count, dtype=dtype)
            dist.all_gather_into_tensor(flat, inputs(rank, count, dtype))
            expect_equal(flat, torch.cat([inputs(r, count, dtype) for r in range(size)]), "_all_gather_base of " + what)


def sent(src, dst, rows, dtype=torch.int64):
    """Rows of two columns rank src sends rank dst in the all-to-alls."""
    return (torch.arange(rows * 2).reshape(rows, 2) + 1000 * src + 100 * dst).to(dtype)


def check_all_to_all(rank, size):
    for rows in [0, 1, 3]:  # even: `rows` rows to each rank
        out = torch.empty(size * rows, 2, dtype=torch.int64)
        dist.all_to_all_single(out, torch.cat([sent(rank, d, rows) for d in range(size)]))
        expect_equal(out, torch.cat([sent(s, rank, rows) for s in range(size)]), f"all_to_all_single, {rows} rows")

    def rows_between(src, dst):  # uneven, zero included
        return (src + 2 * dst) % 3

    send_splits = [rows_between(rank, d) for d in range(size)]
    recv_splits = [rows_between(s, rank) for s in range(size)]
    out = torch.empty(sum(recv_splits), 2, dtype=torch.float64)
    dist.all_to_all_single(out, torch.cat([sent(rank, d, send_splits[d], torch.float64) for d in range(size)]),
                           output_split_sizes=recv_splits, input_split_sizes=send_splits)
    expect_equal(out, torch.cat([sent(s, rank, recv_splits[s], torch.float64) for s in range(size)]),
                 "all_to_all_single with splits")

    outs = [torch.empty(rows_between(s, rank), 2, dtype=torch.int64) for s in range(size)]
    dist.all_to_all(outs, [sent(rank, d, rows_between(rank, d)) for d in range(size)])
    for s in range(size):
        expect_equal(outs[s], sent(s, rank, rows_between(s, rank)), f"all_to_all from {s}")


def check_point_to_point(rank, size):
    if size == 1:
        return  # no other rank to send to
    right, left = (rank + 1) % size, (rank - 1) % size
    for count in COUNTS:
        got = torch.empty(count, dtype=torch.float32)
        waits = [dist.isend(inputs(rank, count, torch.float32), right, tag=7),
                 dist.irecv(got, left, tag=7)]
        for w in waits:
            w.wait()
        expect_equal(got, inputs(left, count, torch.float32), f"send and recv of {count}")
    dist.barrier()


def check_overlap(rank, size):
    """Several calls in flight at once, waited for in reverse, and their futures."""
    parts = [[inputs(r, 1001, torch.float32, case=i) for i in range(4)] for r in range(size)]
    mine = [p.clone() for p in parts[rank]]
    works = [dist.all_reduce(t, async_op=True) for t in mine]
    futures = [w.get_future() for w in works]
    works[0].wait(timeout=datetime.timedelta(seconds=30))  # the form with a timeout
    for w in reversed(works):
        w.wait()
    for i, f in enumerate(futures):
        expect_equal(f.wait()[0], reduced([parts[r][i] for r in range(size)], "SUM", torch.float32), f"future {i}")


def check_errors(rank, size):
    strided = torch.zeros(4, 4).t()
    expect_error(["contiguous"], lambda: dist.all_reduce(strided), "a non-contiguous tensor")
    expect_error(["list of", str(size)], lambda: dist.all_gather([torch.zeros(2)] * (size + 1), torch.zeros(2)),
                 "all_gather with a list too long")
    expect_error(["does not reduce", "ComplexFloat"], lambda: dist.reduce(torch.zeros(2, dtype=torch.cfloat), 0),
                 "a complex tensor")  # (all_reduce sums complex tensors as real ones before they come here)
    dist.barrier()  # the errors came before any call: the group goes on


def operations():
    transport = {"tcp": "tcp"}.get(os.environ.get("COLLECTIVES_TRANSPORT"), "shm")  # one host: shm unless told
    dist.init_process_group("collectives", timeout=datetime.timedelta(seconds=60))
    rank, size = dist.get_rank(), dist.get_world_size()
    group = dist.distributed_c10d._get_default_group()
    if size > 1 and group.transport != transport:
        raise AssertionError(f"joined over {group.transport}, not {transport}")
    checks = [check_reductions, check_coalesced, check_movement, check_all_to_all, check_point_to_point,
              check_overlap, check_errors]
    for check in checks:
        check(rank, size)
    # A group of the even ranks beside the default one.
    evens = dist.new_group(list(range(0, size, 2)), backend="collectives")
    if rank % 2 == 0:
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=evens)
        expect_equal(t, torch.tensor([float(sum(range(0, size, 2)))]), "all_reduce in the group of even ranks")
    dist.barrier()  # no rank leaves (rank 0 serving the store) while another is in new_group's store barrier
    dist.destroy_process_group()
    print(f"rank {rank} of {size} over {transport}: every operation matches the serial reference", flush=True)


def timeout():
    """Rank 1 skips a call: the others' call fails in the group's timeout, naming it."""
    dist.init_process_group("collectives", timeout=datetime.timedelta(seconds=2))
    rank = dist.get_rank()
    if rank != 1:
        started = time.monotonic()
        message = expect_error(["timed out", "rank"], lambda: dist.all_reduce(torch.ones(10)), "a skipped call")
        if "1" not in message or time.monotonic() - started > 20:
            raise AssertionError(f"the timeout does not name rank 1, or came late: {message}")
        print(f"rank {rank}: {message.splitlines()[0]}", flush=True)
    else:
        time.sleep(4)  # alive until the others have timed out (a process gone is another error)
    os._exit(0)  # the group is broken: leave without the destructors' waits


def never_joins():
    """The last rank never creates the group: the others fail within the timeout, naming it."""
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if rank == size - 1:
        time.sleep(5)
        return
    started = time.monotonic()
    message = expect_error([f"rank {size - 1}", "did not join"],
                           lambda: dist.init_process_group("collectives", timeout=datetime.timedelta(seconds=2)),
                           "a rank that never joins")
    if time.monotonic() - started > 20:
        raise AssertionError(f"the start-up failed late ({time.monotonic() - started:.1f} s)")
    print(f"rank {rank}: {message.splitlines()[0]}", flush=True)
    os._exit(0)


def killed_rank_member():
    """Rank 1 is killed before a call: the others' call fails, naming rank 1."""
    dist.init_process_group("collectives", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    started = time.monotonic()
    message = expect_error(["rank 1"], lambda: dist.all_reduce(torch.ones(1 << 20)), "a killed rank")
    if time.monotonic() - started > 20:
        raise AssertionError(f"the failure came late ({time.monotonic() - started:.1f} s)")
    print(f"rank {rank}: {message.splitlines()[0]}", flush=True)
    os._exit(0)


def killed_rank(size):
    """Starts `size` plain processes of killed_rank_member, as torch's env:// init expects."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = []
    for r in range(size):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        ranks.append(subprocess.Popen([sys.executable, __file__, "killed_rank_member"], env=env))
    codes = [p.wait(timeout=120) for p in ranks]
    expected = [-signal.SIGKILL if r == 1 else 0 for r in range(size)]
    if codes != expected:
        raise AssertionError(f"exit statuses {codes}, expected {expected}")
    print(f"killed rank: the {size - 1} others reported it and exited 0", flush=True)


if __name__ == "__main__":
    case = sys.argv[1] if len(sys.argv) > 1 else "operations"
    if case == "killed_rank":
        killed_rank(int(sys.argv[2]))
    else:
        {"operations": operations, "timeout": timeout, "never_joins": never_joins,
         "killed_rank_member": killed_rank_member}[case]()
