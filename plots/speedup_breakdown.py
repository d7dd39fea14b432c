#!/usr/bin/python3
"""Speedup breakdown (SPEC §7): sample throughput per epoch of every mode in
the run (the simulator's modes) and each mode's speedup in total time over
the summary's reference (the best plan without freezing, unless the run was
made with --reference gpipe)."""
from eptrace import load_run
from figure import Figure, Panel, Series, main, mode_name, runs_title


def build(args):
    run = load_run(args.runs[0])
    lines = []
    for mode in run.modes:
        rows = run.epochs_of(mode)
        lines.append(Series(mode_name(mode), [r["epoch"] for r in rows], [r["samples_per_s"] for r in rows]))
    panels = [Panel("line", "epoch (index)", "throughput (samples/s)", lines, "throughput per epoch")]
    # No speedups where the run has no reference (an executor run) or its
    # reference does not fit: there is nothing to draw then.
    drawn = [m for m in run.modes if run.mode(m)["speedup"] is not None]
    if run.reference is not None and drawn:
        speedups = [run.mode(m)["speedup"] for m in drawn]
        bars = Series("speedup", [mode_name(m) for m in drawn], speedups, text=[f"{s:.2f}×" for s in speedups])
        panels.append(Panel("bar", "mode (mechanisms added)", f"speedup over {mode_name(run.reference)} (×)",
                            [bars], "total-time speedup"))
    return Figure(runs_title("Speedup breakdown", [run]), panels)


if __name__ == "__main__":
    main(__doc__, build, many=False)
