#!/usr/bin/python3
"""Communication vs computation (SPEC §7): per mode, the total computation
time and total DDP communication time of one device, and communication's
share. epochs.csv gives both per iteration (comm_s: all-reduce busy time,
gaps between buckets removed); an epoch runs (epoch_s - transition_s) /
iteration_s iterations. Writes FILE.png (stacked bars), FILE.csv, FILE.md."""
from eptrace import load_run
from figure import Figure, Panel, Series, Table, main, mode_name, runs_title


def totals(run, mode):
    compute = comm = 0.0
    for r in run.epochs_of(mode):
        if r["iteration_s"] <= 0:
            raise ValueError(f"{run.dir}/epochs.csv: mode '{mode}' epoch {r['epoch']}: "
                             f"iteration_s = {r['iteration_s']}, expected > 0")
        iterations = (r["epoch_s"] - r["transition_s"]) / r["iteration_s"]
        compute += r["compute_s"] * iterations
        comm += r["comm_s"] * iterations
    return compute, comm


def build(args):
    run = load_run(args.runs[0])
    rows = []
    for mode in run.modes:
        compute, comm = totals(run, mode)
        rows.append([mode, compute, comm, comm / (compute + comm) if compute + comm > 0 else None])
    table = Table(["mode", "computation (s)", "DDP communication (s)", "communication share"],
                  ["{}", "{:,.2f}", "{:,.2f}", "{:.1%}"], rows)
    names = [mode_name(r[0]) for r in rows]
    series = [Series("computation", names, [r[1] for r in rows]),
              Series("DDP communication", names, [r[2] for r in rows])]
    return Figure(runs_title("Communication vs computation", [run]),
                  [Panel("stacked", "mode (mechanisms added)", "total time per device (s)", series)], table)


if __name__ == "__main__":
    main(__doc__, build, many=False)
