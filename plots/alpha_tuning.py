#!/usr/bin/python3
"""Tuning α (SPEC §7): throughput, and accuracy where measured, vs α; one
run directory per α, each read at its full-method mode (autocache, or the
last mode of an executor run)."""
from eptrace import load_run
from figure import Figure, Panel, Series, main, runs_title


def build(args):
    runs = sorted((load_run(d) for d in args.runs), key=lambda r: r.alpha)
    modes = [r.mode(r.main_mode) for r in runs]
    label = "ElasticPipe (" + ", ".join(dict.fromkeys(r.main_mode for r in runs)) + ")"
    panels = [Panel("line", "α (freeze aggressiveness)", "throughput (samples/s)",
                    [Series(label, [r.alpha for r in runs], [m["samples_per_s"] for m in modes])], "throughput")]
    measured = [(r.alpha, m["final_accuracy"]) for r, m in zip(runs, modes) if m["final_accuracy"] is not None]
    if measured:  # the simulator measures no accuracy
        panels.append(Panel("line", "α (freeze aggressiveness)", "final accuracy (fraction)",
                            [Series(label, [a for a, _ in measured], [v for _, v in measured])], "accuracy"))
    return Figure(runs_title("Tuning α", runs), panels)


if __name__ == "__main__":
    main(__doc__, build)
