"""The size sweep's iteration bands, shared by bench/compare and bench/crossover."""

# Large messages take long and vary little between iterations, so sizes from
# SCALE_FROM bytes up run a quarter of the iterations (at least MIN_ITERS): that keeps
# the default comparison to a few minutes on 2 cores.
SCALE_FROM = 4 << 20
MIN_ITERS = 5


def iteration_bands(sizes, iters, warmup):
    """Splits the sweep into runs of (first, last, iters, warmup): fewer iterations for large sizes."""
    bands = []
    for size in sizes:
        if size >= SCALE_FROM:
            n, w = max(MIN_ITERS, iters // 4), max(1, warmup // 4)
        else:
            n, w = iters, warmup
        if bands and bands[-1][2:] == (n, w):
            bands[-1] = (bands[-1][0], size, n, w)
        else:
            bands.append((size, size, n, w))
    return bands
