#!/usr/bin/python3
"""Transition overhead (SPEC §7): seconds per pipeline transformation
(the run's start, K 8->4, ...) from trace.json, split into the parts nested
in it on the same GPU track: AutoCache's probe, creating the node's cache
file, moving weights, creating
device contexts, DDP (re)construction, pipeline warm-up, and whatever else
("other"). One row per
transition, read on the first GPU track that has it. Writes FILE.png
(stacked bars), FILE.csv, FILE.md."""
from eptrace import load_run
from figure import Figure, Panel, Series, Table, main, runs_title

PARTS = ("cache probe", "cache file", "weights", "contexts", "ddp", "warmup")


def is_transition(span):
    # "initialisation": the run's start in traces written before it was named "start"
    return span.category == "transition" and (span.name == "start"
                                              or span.name.startswith(("initialisation", "transition")))


def build(args):
    run = load_run(args.runs[0])
    trace = run.trace
    # Every GPU of a pipeline has its own copy of the transition: keep the
    # one on the first GPU track (tid order) per transition.
    first = {}
    for span in sorted((s for s in trace.spans if is_transition(s) and s.track.kind == "gpu"),
                       key=lambda s: s.track.tid):
        first.setdefault((span.name, span.arg("plan_id"), span.arg("epoch")), span)
    rows = []
    for t in sorted(first.values(), key=lambda s: s.start_s):
        parts = {p: 0.0 for p in PARTS}
        for s in trace.spans:
            if (s.category == "transition" and s.name in parts and s.track is t.track
                    and t.start_s <= s.start_s and s.end_s <= t.end_s):
                parts[s.name] += s.end_s - s.start_s
        total = t.end_s - t.start_s
        other = max(0.0, total - sum(parts.values()))
        name = t.name.replace("initialisation", "init").replace("transition ", "")
        label = f"epoch {t.arg('epoch')}: {name}" if t.arg("epoch") >= 0 else name
        rows.append([label, *parts.values(), other, total])
    if not rows:
        raise ValueError(f"{run.dir}/trace.json: no transition spans on a GPU track")
    columns = ["transition"] + [f"{p} (s)" for p in PARTS + ("other",)] + ["total (s)"]
    table = Table(columns, ["{}"] + ["{:.3f}"] * (len(columns) - 1), rows)
    series = [Series(p, [r[0] for r in rows], [r[1 + i] for r in rows]) for i, p in enumerate(PARTS + ("other",))]
    return Figure(runs_title(f"Transition overhead ({trace.mode})", [run]),
                  [Panel("stacked", "transformation (epoch: K)", "time (s)", series)], table)


if __name__ == "__main__":
    main(__doc__, build, many=False)
