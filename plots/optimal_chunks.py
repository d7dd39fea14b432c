#!/usr/bin/python3
"""Optimal chunks (SPEC §7): throughput vs the number of micro-batches M, one
line per pipeline length K, from the run's chunks.csv; the chosen M is
starred, an M that does not fit in memory is drawn hollow. --mode picks the
mode (default autocache, else the last mode in the file)."""
from eptrace import load_run
from figure import Figure, Panel, Series, main, runs_title


def build(args):
    run = load_run(args.runs[0])
    chunks = run.chunks
    modes = list(dict.fromkeys(c["mode"] for c in chunks))
    mode = args.mode or ("autocache" if "autocache" in modes else modes[-1] if modes else None)
    rows = [c for c in chunks if c["mode"] == mode]
    if not rows:
        raise ValueError(f"{run.dir}/chunks.csv: no rows for mode '{mode}' (modes: {', '.join(modes) or 'none'})")
    series = []
    for K in dict.fromkeys(c["K"] for c in rows):
        pts = [c for c in rows if c["K"] == K]
        series.append(Series(f"K = {K} ({pts[0]['replicas']} replicas)", [c["M"] for c in pts],
                             [c["samples_per_s"] for c in pts],
                             marked=[i for i, c in enumerate(pts) if c["chosen"]],
                             faded=[i for i, c in enumerate(pts) if not c["fits_memory"]]))
    return Figure(runs_title(f"Optimal chunks ({mode}; ★ = chosen M)", [run]),
                  [Panel("line", "micro-batches per mini-batch M (count)", "throughput (samples/s)", series)])


if __name__ == "__main__":
    main(__doc__, build, many=False,
         options=lambda p: p.add_argument("--mode", help="mode in chunks.csv (default autocache, else the last)"))
