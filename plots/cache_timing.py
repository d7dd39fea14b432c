#!/usr/bin/python3
"""Timing of caching (SPEC §7): throughput per epoch with AutoCache (mode
autocache) and without it (mode autodp, everything else equal)."""
from eptrace import load_run
from figure import Figure, Panel, Series, main, runs_title


def build(args):
    run = load_run(args.runs[0])
    series = []
    for mode, label in (("autocache", "with cache (autocache)"), ("autodp", "without cache (autodp)")):
        run.mode(mode)  # a clear error when the run lacks it
        rows = run.epochs_of(mode)
        series.append(Series(label, [r["epoch"] for r in rows], [r["samples_per_s"] for r in rows]))
    return Figure(runs_title("Timing of caching", [run]),
                  [Panel("line", "epoch (index)", "throughput (samples/s)", series)])


if __name__ == "__main__":
    main(__doc__, build, many=False)
