"""Draws a trace that COLLECTIVES_TRACE wrote (Chrome trace-event JSON) as a timeline.

A band per rank; in it a row per row of calls the file gives (calls in flight at the
same time get rows of their own). Calls are bars coloured by their name, labelled with
their call number; their steps are thinner marks inside them: waits in the transport
(grey), reductions and copies (dark), and ticks where a message was posted (above the
bar) and seen complete (below it). Needs matplotlib (Debian: python3-matplotlib).

usage: /usr/bin/python3 scripts/trace_picture.py TRACE.json OUT.png [--from MS] [--to MS] [--title TEXT]
       times in milliseconds from the first event
"""

import argparse
import json
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

STEP_COLOURS = {"wait": "#b8b8b8", "reduce": "#202060", "copy": "#206020", "finalize": "#602060"}
CALL_COLOURS = ["#f4a259", "#5b8e7d", "#8cb8d8", "#bc4b51", "#f4e285", "#9b8ec4", "#7fb069", "#e6aace"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("out")
    parser.add_argument("--from", dest="start", type=float, default=None, help="ms from the first event")
    parser.add_argument("--to", dest="end", type=float, default=None, help="ms from the first event")
    parser.add_argument("--title", default=None)
    args = parser.parse_args()

    with open(args.trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    if not events:
        raise SystemExit(f"{args.trace}: no events")
    origin = min(e["ts"] for e in events)
    start = args.start if args.start is not None else 0.0
    end = args.end if args.end is not None else max(e["ts"] + e["dur"] - origin for e in events) / 1000

    def ms(us):
        return (us - origin) / 1000

    shown = [e for e in events if ms(e["ts"] + e["dur"]) >= start and ms(e["ts"]) <= end]
    rows = defaultdict(set)  # rank -> its rows of calls
    for e in shown:
        rows[e["pid"]].add(e["tid"])
    # Bands from the top: rank 0 first, each with its rows in order.
    y_of, labels, y = {}, [], 0
    for rank in sorted(rows):
        for row in sorted(rows[rank]):
            y_of[(rank, row)] = y
            labels.append((y, f"rank {rank}" if row == 0 else f"  in flight {row + 1}"))
            y -= 1
        y -= 0.4  # a gap between ranks

    names = sorted({e["name"] for e in shown if e["cat"] == "call"})
    colour_of = {n: CALL_COLOURS[i % len(CALL_COLOURS)] for i, n in enumerate(names)}
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.42 * len(labels)))
    height = 0.8
    for e in shown:
        x, width, base = ms(e["ts"]), e["dur"] / 1000, y_of[(e["pid"], e["tid"])]
        if e["cat"] == "call":
            ax.barh(base, width, left=x, height=height, color=colour_of[e["name"]], edgecolor="black", linewidth=0.4)
            middle = (max(x, start) + min(x + width, end)) / 2  # of the part shown
            if min(x + width, end) - max(x, start) > (end - start) / 60:
                ax.text(middle, base, str(e["args"]["call"]), ha="center", va="center", fontsize=6, clip_on=True)
        elif e["cat"] in STEP_COLOURS:
            thin = 0.3 if e["cat"] == "wait" else 0.18
            ax.barh(base, max(width, (end - start) / 3000), left=x, height=thin, color=STEP_COLOURS[e["cat"]], linewidth=0)
        elif e["cat"] in ("post", "complete"):
            top = e["cat"] == "post"
            y0, y1 = (base + 0.1, base + height / 2) if top else (base - height / 2, base - 0.1)
            ax.vlines(x, y0, y1, colors="black" if top else "#c03030", linewidth=0.5)

    ax.set_xlim(start, end)
    ax.set_yticks([y for y, _ in labels], [text for _, text in labels], fontsize=8)
    ax.set_xlabel("ms from the first event")
    ax.grid(axis="x", linewidth=0.3, alpha=0.5)
    legend = [Patch(facecolor=colour_of[n], edgecolor="black", label=n) for n in names]
    legend += [Patch(facecolor=c, label=k) for k, c in STEP_COLOURS.items()]
    legend += [plt.Line2D([], [], color="black", lw=0.8, label="post (above)"),
               plt.Line2D([], [], color="#c03030", lw=0.8, label="complete (below)")]
    ax.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.005, 1), fontsize=7, frameon=False)
    if args.title:
        ax.set_title(args.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=130)


if __name__ == "__main__":
    main()
