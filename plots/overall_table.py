#!/usr/bin/python3
"""Overall acceleration (SPEC §7): per workload (one run directory each), the
training time of the reference (the best plan without freezing, or the
paper's GPipe baseline where the run was made with --reference gpipe) and of
ElasticPipe (autocache, or the last mode of an executor run), the speedup and
each one's accuracy (— when not measured). Writes FILE.png (the two times per workload), FILE.csv, FILE.md.

Real runs come in pairs, one workload per --pair BASE_DIR METHOD_DIR: two
elasticpipe train runs of the same config, data, epochs and cluster, the
baseline (no freezing: no layer frozen in any epoch) and the method. Their row has the two measured total
times, the speedup (the baseline's time over the method's) and their final
accuracies. Pairs come after the RUN_DIRs, which may be left out."""
from eptrace import TraceError, check_comparable, frozen_count, load_run, measured_speedup
from figure import Figure, Panel, Series, Table, main, runs_title


def accuracy(mode):
    return None if mode is None else mode["final_accuracy"]


def options(parser):
    parser.add_argument("--pair", nargs=2, action="append", default=[], metavar=("BASE_DIR", "METHOD_DIR"),
                        help="a baseline train run and the method's, of one workload (repeatable)")


def build(args):
    if not args.runs and not args.pair:
        raise ValueError("overall_table.py: expected RUN_DIR... or --pair BASE_DIR METHOD_DIR, found neither")
    runs = [load_run(d) for d in args.runs]
    rows = []
    for run in runs:
        base = run.mode(run.reference) if run.reference else None
        method = run.mode(run.main_mode)
        rows.append([run.label, run.main_mode, base and base["total_s"], method["total_s"],
                     method["speedup"], accuracy(base), accuracy(method), run.source])
    for base_dir, method_dir in args.pair:
        base, method = load_run(base_dir), load_run(method_dir)
        b, m = base.only_mode(), method.only_mode()
        check_comparable([base, method])
        # The baseline is training without freezing; a swapped pair would
        # otherwise show as a slowdown.
        frozen = [r for r in base.epochs_of(b["mode"]) if frozen_count(r) > 0]
        if frozen:
            raise TraceError(f"{base.dir}/epochs.csv: {frozen_count(frozen[0])} layer(s) frozen in epoch "
                             f"{frozen[0]['epoch']}; expected a baseline without freezing "
                             "(planner.freeze_policy = \"none\") as --pair's BASE_DIR")
        rows.append([method.label, m["mode"], b["total_s"], m["total_s"], measured_speedup(base, method),
                     b["final_accuracy"], m["final_accuracy"], method.source])
        runs += [base, method]
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
    main(__doc__, build, options=options, nargs="*")
