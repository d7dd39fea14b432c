#!/usr/bin/python3
"""Speedup breakdown (SPEC §7): sample throughput per epoch of every mode in
the run (the simulator's modes) and each mode's speedup in total time over
the summary's reference (the best plan without freezing, unless the run was
made with --reference gpipe).

From real runs: several RUN_DIRs, elasticpipe train runs of the same config,
data, epochs and cluster, one per configuration (e.g. no freezing, freezing
without the cache, freezing with it). Each is a line named after its folder,
or after its --label (one per RUN_DIR, in order), and a bar of its measured
speedup in total time over the first RUN_DIR."""
from eptrace import check_comparable, load_run, measured_speedup
from figure import Figure, Panel, Series, main, mode_name, runs_title


def options(parser):
    parser.add_argument("--label", action="append", metavar="NAME",
                        help="the name of a RUN_DIR's line and bar (one per RUN_DIR, in order; "
                             "default: its folder's name)")


def simulated(run):
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


def measured(runs, labels):
    if labels is not None and len(labels) != len(runs):
        raise ValueError(f"speedup_breakdown.py: {len(labels)} --label for {len(runs)} RUN_DIRs; expected one per RUN_DIR")
    labels = labels or [run.name for run in runs]
    for label in labels:
        if labels.count(label) > 1:
            raise ValueError(f"speedup_breakdown.py: two runs named '{label}'; expected distinct names (give --label)")
    lines = []
    for run, label in zip(runs, labels):
        rows = run.epochs_of(run.only_mode()["mode"])
        lines.append(Series(label, [r["epoch"] for r in rows], [r["samples_per_s"] for r in rows]))
    check_comparable(runs)
    panels = [Panel("line", "epoch (index)", "throughput (samples/s)", lines, "throughput per epoch")]
    if len(runs) > 1:
        speedups = [measured_speedup(runs[0], run) for run in runs]
        bars = Series("speedup", labels, speedups, text=[f"{s:.2f}×" for s in speedups])
        panels.append(Panel("bar", "run (configuration)", f"speedup over {labels[0]} (×)", [bars], "total-time speedup"))
    return Figure(runs_title("Speedup breakdown", runs), panels)


def build(args):
    runs = [load_run(d) for d in args.runs]
    # One run without --label: a line per mode it holds (a simulation's
    # seven, a train run's one) and the speedups its summary holds.
    if len(runs) == 1 and args.label is None:
        return simulated(runs[0])
    return measured(runs, args.label)


if __name__ == "__main__":
    main(__doc__, build, options=options)
