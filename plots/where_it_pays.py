#!/usr/bin/python3
"""Where the method pays: the full method's simulated speedup (autocache)
over the best static plan (baseline) against cluster size, one line per
training length, one panel per model, from the folder
bench/where_it_pays.py wrote (its points.csv). The line at 1.0 is
the best static plan; each line's crossover, the smallest cluster from
which its speedup (to three decimals) is 1.000 or less, is starred and
named in the legend ("pays everywhere" where there is none); a point where
the method does not fit memory is drawn hollow, one where the baseline does
not fit has no speedup and is left out. Writes FILE.png and the speedups
per model, cluster size and length as FILE.csv and FILE.md."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from figure import DRAW, Figure, Panel, Series, Table, main  # noqa: E402
from where_it_pays_table import crossover, lines_of, read_results  # noqa: E402

CSV = "points.csv"


def _draw_scaling(ax, p):
    """Lines on a log2 axis of GPUs, the 1.0 line, each crossover starred and labelled."""
    gpus = sorted({x for s in p.series for x in s.x})
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="best static plan (1.0)")
    for s in p.series:
        (line,) = ax.plot(s.x, s.y, marker="o", ms=4, label=s.label)
        for i in s.faded or []:
            ax.plot(s.x[i], s.y[i], marker="o", ms=7, mfc="white", color=line.get_color())
        for i in s.marked or []:
            ax.plot(s.x[i], s.y[i], marker="*", ms=15, mec="black", color=line.get_color())
            ax.annotate(f"{s.x[i]:,}", (s.x[i], s.y[i]), textcoords="offset points", xytext=(0, 9),
                        ha="center", fontsize=8, color=line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_xticks(gpus, [f"{g:,}" for g in gpus])
    ax.tick_params(axis="x", labelrotation=45)
    ax.minorticks_off()
    ax.legend(loc="best")  # also for one line: its label names the crossover


DRAW["scaling"] = _draw_scaling


def _series(line):
    shown = [r for r in line if r["speedup"] is not None]
    c = crossover(line)
    where = "pays everywhere" if c is None else f"stops paying at {c['gpus']:,} GPUs"
    label = f"{line[0]['epochs']} epochs: {where}"
    return Series(label, [r["gpus"] for r in shown], [r["speedup"] for r in shown],
                  marked=[i for i, r in enumerate(shown) if r is c] or None,
                  faded=[i for i, r in enumerate(shown) if not r["method_fits"]] or None)


def build(args):
    rows = read_results(os.path.join(args.runs[0], CSV))
    lines = lines_of(rows)
    models = list(dict.fromkeys(m for m, _ in lines))
    epochs = sorted({e for _, e in lines})
    panels = [Panel("scaling", "cluster size (GPUs, log scale)", "speedup over the best static plan (×)",
                    [_series(line) for (m, _), line in sorted(lines.items(), key=lambda kv: kv[0][1]) if m == model],
                    title=model) for model in models]
    speedup = {(r["model"], r["gpus"], r["epochs"]): r["speedup"] for r in rows}
    batch = {(r["model"], r["gpus"]): r["global_batch"] for r in rows}
    table = Table(["model", "GPUs", "global batch"] + [f"speedup, {e} epochs (×)" for e in epochs],
                  ["{}", "{:,}", "{:,}"] + ["{:.3f}"] * len(epochs),
                  [[m, g, batch[m, g]] + [speedup.get((m, g, e)) for e in epochs]
                   for m in models for g in sorted({g for mm, g in batch if mm == m})])
    title = ("Where the method pays: the full method (autocache) over the best static plan (baseline), "
             "simulated\n★ = crossover: the smallest cluster from which the speedup is 1.000 or less")
    return Figure(title, panels, table)


if __name__ == "__main__":
    main(__doc__, build, many=False)
