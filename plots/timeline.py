#!/usr/bin/python3
"""Pipeline timeline (SPEC §7): the GPipe picture of one iteration from
trace.json: one row per GPU (compute lane), boxes for forward and backward
and for the frozen forward, cache reads and writes and the optimizer, the
micro-batch number written where it fits. Picks the plan (--plan, default
the first present), the replica (--replica, default the lowest) and the
iteration (--epoch, --iteration, default the first present)."""
from eptrace import load_run
from figure import Figure, Panel, Series, main, runs_title

COLORS = {"forward": "#4c72b0", "backward": "#dd8452", "frozen_forward": "#8c8c8c",
          "cache_read": "#55a868", "cache_write": "#64b5cd", "optimizer": "#8172b2"}


def pick(spans, key, wanted, what):
    """The spans whose arg `key` is `wanted` (default: the first value present)."""
    present = sorted({s.arg(key) for s in spans})
    value = present[0] if wanted is None and present else wanted
    chosen = [s for s in spans if s.arg(key) == value]
    if not chosen:
        raise ValueError(f"no {what} {value} among the spans ({what}s present: {', '.join(map(str, present))})")
    return value, chosen


def build(args):
    run = load_run(args.runs[0])
    spans = [s for s in run.trace.spans
             if s.category in COLORS and s.track.kind == "gpu" and s.track.lane == 0]
    try:
        plan, spans = pick(spans, "plan_id", args.plan, "plan")
        replica, spans = pick(spans, "replica", args.replica, "replica")
        epoch, spans = pick(spans, "epoch", args.epoch, "epoch")
        iteration, spans = pick(spans, "iteration", args.iteration, "iteration")
    except ValueError as e:
        raise ValueError(f"{run.dir}/trace.json: {e}") from None
    tracks = sorted({s.track.tid: s.track for s in spans}.values(), key=lambda t: (t.node, t.index))
    row = {t.tid: i for i, t in enumerate(tracks)}
    multi_node = len({t.node for t in tracks}) > 1
    t0 = min(s.start_s for s in spans)
    series = []
    for cat, color in COLORS.items():
        boxes = [s for s in spans if s.category == cat]
        if boxes:
            series.append(Series(cat, [(s.start_s - t0) * 1e3 for s in boxes], [row[s.track.tid] for s in boxes],
                                 width=[(s.end_s - s.start_s) * 1e3 for s in boxes],
                                 text=[str(s.arg("microbatch")) if s.arg("microbatch") >= 0 else "" for s in boxes],
                                 color=color))
    names = [f"node {t.node} {t.name}" if multi_node else t.name for t in tracks]
    where = f"plan {plan}, replica {replica}" + (f", epoch {epoch}" if epoch >= 0 else "") + f", iteration {iteration}"
    return Figure(runs_title(f"Pipeline timeline ({run.trace.mode}; {where})", [run]),
                  [Panel("gantt", "time since the iteration's first span (ms)", "device (GPU track)", series,
                         yticks=names)])


def options(p):
    for name in ("plan", "replica", "epoch", "iteration"):
        p.add_argument(f"--{name}", type=int, help=f"the {name} to draw (default: the first present)")


if __name__ == "__main__":
    main(__doc__, build, many=False, options=options)
