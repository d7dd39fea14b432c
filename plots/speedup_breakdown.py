#!/usr/bin/python3
"""Speedup breakdown (SPEC §7): sample throughput per epoch of every mode in
the run (the simulator's five ablation modes) and each mode's speedup in
total time over the baseline."""
from eptrace import load_run
from figure import Figure, Panel, Series, main, mode_name, runs_title


def build(args):
    run = load_run(args.runs[0])
    lines = []
    for mode in run.modes:
        rows = run.epochs_of(mode)
        lines.append(Series(mode_name(mode), [r["epoch"] for r in rows], [r["samples_per_s"] for r in rows]))
    panels = [Panel("line", "epoch (index)", "throughput (samples/s)", lines, "throughput per epoch")]
    # The summary's speedup is 0 when the run has no baseline (an executor
    # run, say): there is nothing to draw then.
    if "baseline" in run.modes:
        speedups = [run.mode(m)["speedup"] for m in run.modes]
        bars = Series("speedup", [mode_name(m) for m in run.modes], speedups,
                      text=[f"{s:.2f}×" for s in speedups])
        panels.append(Panel("bar", "mode (mechanisms added)", "speedup over baseline (×)", [bars],
                            "total-time speedup"))
    return Figure(runs_title("Speedup breakdown", [run]), panels)


if __name__ == "__main__":
    main(__doc__, build, many=False)
