#!/usr/bin/python3
"""Overall acceleration (SPEC §7): per workload (one run directory each), the
training time of the reference (the best plan without freezing, or the
paper's GPipe baseline where the run was made with --reference gpipe) and of
ElasticPipe (autocache, or the last mode of an executor run), the speedup and
each one's accuracy (— when not measured). Writes FILE.png (the two times per workload), FILE.csv, FILE.md."""
from eptrace import load_run
from figure import Figure, Panel, Series, Table, main, runs_title


def accuracy(mode):
    return None if mode is None else mode["final_accuracy"]


def build(args):
    runs = [load_run(d) for d in args.runs]
    rows = []
    for run in runs:
        base = run.mode(run.reference) if run.reference else None
        method = run.mode(run.main_mode)
        rows.append([run.label, run.main_mode, base and base["total_s"], method["total_s"],
                     method["speedup"], accuracy(base), accuracy(method), run.source])
    table = Table(["workload", "method mode", "baseline time (s)", "ElasticPipe time (s)", "speedup (×)",
                   "baseline accuracy", "ElasticPipe accuracy", "source"],
                  ["{}", "{}", "{:,.1f}", "{:,.1f}", "{:.2f}", "{:.4f}", "{:.4f}", "{}"], rows)
    names = [f"{r[0]}\n({r[-1]})" for r in rows]  # a config may come both simulated and executed
    times = [t for r in rows for t in r[2:4] if t]
    series = [Series("baseline", names, [r[2] for r in rows]),
              Series("ElasticPipe", names, [r[3] for r in rows],
                     text=["" if r[4] is None else f"{r[4]:.2f}×" for r in rows])]
    # Workloads differ by ~100x in time (SPEC §7); a log axis keeps the short ones visible.
    panel = Panel("bar", "workload (config)", "training time (s)", series, logy=max(times) > 20 * min(times))
    return Figure(runs_title("Overall acceleration", runs), [panel], table)


if __name__ == "__main__":
    main(__doc__, build)
