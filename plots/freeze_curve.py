#!/usr/bin/python3
"""Freeze curve (SPEC §7): frozen layers L_frozen (the prefix and any frozen
inside it) vs freeze step T, one line per α. Give one run directory per α; each line is its full-method mode
(autocache, or the last mode of an executor run), T being the epoch."""
import os

from eptrace import frozen_count, load_run
from figure import Figure, Panel, Series, main, runs_title


def build(args):
    runs = sorted((load_run(d) for d in args.runs), key=lambda r: r.alpha)
    labels = [f"α = {run.alpha:.2g}" for run in runs]
    series = []
    for run, label in zip(runs, labels):
        rows = run.epochs_of(run.main_mode)
        if labels.count(label) > 1:  # runs differing in something else: name them
            label += f" ({os.path.basename(os.path.normpath(run.dir))})"
        series.append(Series(label, [r["epoch"] for r in rows], [frozen_count(r) for r in rows]))
    return Figure(runs_title("Freeze curve", runs),
                  [Panel("line", "freeze step T (epoch)", "frozen layers L_frozen (layers)", series)])


if __name__ == "__main__":
    main(__doc__, build)
