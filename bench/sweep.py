"""The size sweep's iteration bands, shared by bench/compare and bench/crossover."""

# Large messages take long and vary little between iterations, so sizes from
# SCALE_FROM bytes up run a quarter of the iterations (at least MIN_ITERS): that keeps
# the default comparison to a few minutes on 2 cores. Small ones take a microsecond or
# a few over shm: 20 of them would time mostly the clock reads and the ranks' skew
# after the barrier, so sizes below SMALL_UNTIL run more iterations (and warm-up):
# SMALL_UNTIL / size times as many, at most SMALL_FACTOR times, a few milliseconds a
# run. (With 50 times below 64 KiB and none from there, 64 KiB's 20 calls over shm
# lasted 150 µs, and one late wake-up made a round read 2 to 4 times the others.)
SCALE_FROM = 4 << 20
MIN_ITERS = 5
SMALL_UNTIL = 1 << 20
SMALL_FACTOR = 50


def small_factor(size):
    """How many times the iterations a size below SMALL_UNTIL runs."""
    return max(1, min(SMALL_FACTOR, SMALL_UNTIL // max(size, 1)))


def iteration_bands(sizes, iters, warmup):
    """Splits the sweep into runs of (first, last, iters, warmup): more iterations for
    small sizes, fewer for large ones."""
    bands = []
    for size in sizes:
        if size >= SCALE_FROM:
            n, w = max(MIN_ITERS, iters // 4), max(1, warmup // 4)
        elif size < SMALL_UNTIL:
            n, w = iters * small_factor(size), warmup * small_factor(size)
        else:
            n, w = iters, warmup
        if bands and bands[-1][2:] == (n, w):
            bands[-1] = (bands[-1][0], size, n, w)
        else:
            bands.append((size, size, n, w))
    return bands
