#!/usr/bin/python3
"""Draws collectives-sim's JSON lines as a crossover plot.

For each collective, rank count and model in the file, a row of two panels against the
message size: each algorithm's simulated time relative to the fastest at that size
(1x: the fastest), where a crossover shows as two lines crossing; and each algorithm's
bus bandwidth. `automatic` is drawn dashed over the algorithm it picked, with a ring
in that algorithm's colour at each size. collectives-sim --plot runs this with
Debian's /usr/bin/python3, which has python3-matplotlib.

usage: /usr/bin/python3 collectives-sim-plot.py ROWS.jsonl OUT.png
"""

import io
import json
import sys

try:
    import matplotlib
except ImportError:
    sys.exit("collectives-sim-plot: needs matplotlib for /usr/bin/python3 (Debian: apt-get install python3-matplotlib)")

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, LogLocator
from PIL import Image  # python3-pil, which python3-matplotlib depends on


def size_label(n, _=None):
    for shift, unit in ((30, "G"), (20, "M"), (10, "K")):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g}{unit}"
    return f"{n:g}"


def size_axis(ax):
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4, numticks=20))
    ax.xaxis.set_major_formatter(FuncFormatter(size_label))
    ax.set_xlabel("message size (bytes)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="major", linewidth=0.4, alpha=0.5)


def draw(axes, rows):
    relative, busbw = axes
    sizes = sorted({r["size"] for r in rows})
    algorithms = list(dict.fromkeys(r["algorithm"] for r in rows if r["algorithm"] != "automatic"))
    row = {(r["size"], r["algorithm"]): r for r in rows}
    fastest = {s: min(r["time_us"] for r in rows if r["size"] == s) for s in sizes}  # automatic runs one of them
    colours = dict(zip(algorithms, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4))
    for a in algorithms:
        mine = [s for s in sizes if (s, a) in row]
        relative.plot(mine, [row[s, a]["time_us"] / fastest[s] for s in mine], marker="o", markersize=3,
                      color=colours[a], label=a)
        busbw.plot(mine, [row[s, a]["busbw"] for s in mine], marker="o", markersize=3, color=colours[a], label=a)
    relative.set_title("time relative to the fastest (lower is better)", fontsize=9)
    picked = [s for s in sizes if (s, "automatic") in row]
    if picked:
        choice = [row[s, "automatic"]["planned_by"] for s in picked]
        times = [row[s, "automatic"]["time_us"] / fastest[s] for s in picked]
        relative.plot(picked, times, linestyle="--", color="black", linewidth=1)
        relative.scatter(picked, times, s=60, facecolors="none", linewidths=1.5, zorder=3,
                         edgecolors=[colours.get(c, "black") for c in choice])
        busbw.plot(picked, [row[s, "automatic"]["busbw"] for s in picked], linestyle="--", color="black",
                   linewidth=1, label="automatic (left: circled in its pick's colour)")
        worst = max(zip(times, picked))
        verdict = (f"automatic at worst {worst[0]:.2f}x ({size_label(worst[1])})" if worst[0] >= 1.005
                   else "automatic the fastest at every size")
        relative.set_title(f"time relative to the fastest (lower is better); {verdict}", fontsize=9)
    size_axis(relative)
    relative.set_yscale("log")
    relative.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 1.5, 2, 3, 5, 7)))
    relative.yaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
    relative.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}x"))
    relative.set_ylim(bottom=0.9)
    relative.set_ylabel("time / fastest at that size", fontsize=8)
    size_axis(busbw)
    busbw.set_yscale("log")
    busbw.set_ylabel("busbw (GB/s)", fontsize=8)
    busbw.set_title("bus bandwidth (higher is better)", fontsize=9)
    busbw.legend(fontsize=6, loc="lower right")  # one legend for both panels, where busbw leaves room


def main(rows_path, png):
    groups = {}
    with open(rows_path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                key = (r["collective"], r["ranks"], r["ranks_per_host"], r.get("model", "?"))
                groups.setdefault(key, []).append(r)
    if not groups:
        sys.exit(f"collectives-sim-plot: {rows_path} has no rows")
    fig = plt.figure(figsize=(10, 3.8 * len(groups)), constrained_layout=True)
    for sub, ((collective, ranks, per_host, model), rows) in zip(fig.subfigures(len(groups), 1, squeeze=False)[:, 0], groups.items()):
        sub.suptitle(f"collectives-sim {collective}: {ranks} ranks, {per_host} per host, model {model}", fontsize=10)
        draw(sub.subplots(1, 2), rows)
    save_small(fig, png)


def save_small(fig, png):
    """A PNG of 64 colours, as bench/plot_busbw.py writes: a third of matplotlib's size."""
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=90)
    image = Image.open(buffer).convert("RGB").quantize(colors=64)
    image.save(png, optimize=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
