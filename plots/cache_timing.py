#!/usr/bin/python3
"""Timing of caching (SPEC §7): throughput per epoch with AutoCache (mode
autocache) and without it (mode autodp, everything else equal).

From real runs: --with-cache RUN_DIR --without-cache RUN_DIR instead of
RUN_DIR, two elasticpipe train runs of the same config, data, epochs and
cluster, one with the cache (planner.cache = "on": on from the first
freeze) and one without it (planner.cache = "off"); each line is named after its run's folder."""
from eptrace import TraceError, check_comparable, load_run
from figure import Figure, Panel, Series, main, runs_title


def options(parser):
    parser.add_argument("--with-cache", metavar="RUN_DIR", help="a train run with the cache on")
    parser.add_argument("--without-cache", metavar="RUN_DIR", help="the same training without the cache")


def simulated(run):
    if len(run.modes) == 1 and "autocache" not in run.modes:
        raise TraceError(f"{run.dir}/summary.json: one mode ({run.modes[0]}); expected a simulation with modes "
                         "autocache and autodp, or two train runs as --with-cache RUN_DIR --without-cache RUN_DIR")
    series = []
    for mode, label in (("autocache", "with cache (autocache)"), ("autodp", "without cache (autodp)")):
        run.mode(mode)  # a clear error when the run lacks it
        rows = run.epochs_of(mode)
        series.append(Series(label, [r["epoch"] for r in rows], [r["samples_per_s"] for r in rows]))
    return Figure(runs_title("Timing of caching", [run]),
                  [Panel("line", "epoch (index)", "throughput (samples/s)", series)])


def measured(with_dir, without_dir):
    runs = [load_run(with_dir), load_run(without_dir)]
    for run in runs:
        run.only_mode()
    check_comparable(runs)
    series = []
    for run, cached, option in ((runs[0], True, "--with-cache"), (runs[1], False, "--without-cache")):
        rows = run.epochs_of(run.only_mode()["mode"])
        # The cache column says whether AutoCache was on in each epoch: a
        # swapped pair would otherwise draw each line under the other's name.
        read = [r["epoch"] for r in rows if r["cache"]]
        if cached and not read:
            raise TraceError(f"{run.dir}/epochs.csv: column 'cache' is 0 in every epoch; "
                             f"expected a run with the cache on for {option}")
        if not cached and read:
            raise TraceError(f"{run.dir}/epochs.csv: column 'cache' is 1 in epoch {read[0]}; "
                             f"expected a run with the cache off in every epoch for {option}")
        label = f"{'with' if cached else 'without'} cache ({run.name})"
        series.append(Series(label, [r["epoch"] for r in rows], [r["samples_per_s"] for r in rows]))
    return Figure(runs_title("Timing of caching", runs),
                  [Panel("line", "epoch (index)", "throughput (samples/s)", series)])


def build(args):
    real = (args.with_cache, args.without_cache)
    if args.runs and real == (None, None) and len(args.runs) == 1:
        return simulated(load_run(args.runs[0]))
    if not args.runs and None not in real:
        return measured(*real)
    given = ([f"{len(args.runs)} RUN_DIR"] if args.runs else []) + \
        [option for option, d in zip(("--with-cache", "--without-cache"), real) if d is not None]
    raise ValueError("cache_timing.py: expected one RUN_DIR (a simulation with modes autocache and autodp) "
                     f"or --with-cache RUN_DIR --without-cache RUN_DIR, found {' and '.join(given) or 'neither'}")


if __name__ == "__main__":
    main(__doc__, build, options=options, nargs="*")
