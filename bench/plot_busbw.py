"""Draws bench/compare's summary.json as bus bandwidth against message size.

One panel per (collective, transport); a line per program and rank count (ours solid,
Open MPI dotted, ours over rdma dash-dotted, Open MPI over mtl ofi dashed, where the
summary has them; a colour per rank count), shaded between the rounds' lowest and
highest figures; the transport's limit as a dashed line
(iperf3 on tcp panels, memcpy on shm panels). bench/compare runs this with Debian's
/usr/bin/python3, which has python3-matplotlib.

usage: /usr/bin/python3 bench/plot_busbw.py SUMMARY.json OUT.png
"""

import io
import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, LogLocator
from PIL import Image  # python3-pil, which python3-matplotlib depends on

LIMITS = {"tcp": ("iperf3_GBps", "iperf3 loopback, 1 stream"), "shm": ("memcpy_GBps", "memcpy")}
PROGRAMS = {"collectives": ("ours", "-", "o"), "openmpi": ("Open MPI", ":", "s"),
            "collectives_rdma": ("ours rdma", "-.", "^"), "openmpi_ofi": ("Open MPI ofi", "--", "v")}
MPI_BTL = {"tcp": "btl self,tcp", "shm": "btl self,vader"}


def size_label(n, _=None):
    for shift, unit in ((30, "G"), (20, "M"), (10, "K")):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g}{unit}"
    return f"{n:g}"


def panel(ax, collective, transport, rows, limits):
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ranks = sorted({r["ranks"] for r in rows})
    for i, p in enumerate(ranks):
        mine = [r for r in rows if r["ranks"] == p]
        sizes = [r["bytes"] for r in mine]
        colour = colours[i % len(colours)]
        for program, (name, style, marker) in PROGRAMS.items():
            if not all(program in r for r in mine):  # rdma and ofi: only where measured
                continue
            ax.plot(sizes, [r[program]["busbw_GBps"] for r in mine], linestyle=style, marker=marker,
                    markersize=3, color=colour, label=f"{name}, {p} ranks")
            if "busbw_range" in mine[0][program]:  # the rounds' spread: how far to trust a median
                low, high = zip(*(r[program]["busbw_range"] for r in mine))
                ax.fill_between(sizes, low, high, color=colour, alpha=0.12, linewidth=0)
    key, name = LIMITS[transport]
    ax.axhline(limits[key], color="0.3", linestyle="--", linewidth=1,
               label=f"{name} {limits[key]:.2f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(size_label))
    extras = [PROGRAMS[p][0] for p in ("collectives_rdma", "openmpi_ofi") if any(p in r for r in rows)]
    ax.set_title(f"{collective}: ours over {transport}, Open MPI {MPI_BTL[transport]}"
                 + (f" (+ {', '.join(extras)})" if extras else ""), fontsize=9)
    ax.set_xlabel("message size (bytes)", fontsize=8)
    ax.set_ylabel("busbw (GB/s)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="major", linewidth=0.4, alpha=0.5)
    ax.legend(fontsize=6, loc="upper left")


def main(summary_path, png):
    summary = json.load(open(summary_path))
    panels = {}
    for row in summary["rows"]:
        panels.setdefault((row["collective"], row["transport"]), []).append(row)
    collectives = list(dict.fromkeys(c for c, _ in panels))
    transports = list(dict.fromkeys(t for _, t in panels))
    fig, axes = plt.subplots(len(collectives), len(transports), squeeze=False,
                             figsize=(5 * len(transports), 3.4 * len(collectives)), constrained_layout=True)
    for (collective, transport), rows in panels.items():
        ax = axes[collectives.index(collective)][transports.index(transport)]
        panel(ax, collective, transport, rows, summary["limits"])
    machine = summary["machine"]
    fig.suptitle(f"{summary['date']}, {machine['cpus']} shared cores; medians of {summary['rounds']} "
                 "alternating rounds, shaded from the lowest to the highest", fontsize=9)
    save_small(fig, png)


def save_small(fig, png):
    """A PNG of 64 colours: a third of the size of matplotlib's own, so a plot of every
    collective stays small enough to commit."""
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=90)
    image = Image.open(buffer).convert("RGB").quantize(colors=64)
    image.save(png, optimize=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
