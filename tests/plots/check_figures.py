#!/usr/bin/python3
"""Check a figure script's --describe output against its input run directories.

    check_figures.py FIGURE DESCRIBE.json RUN_DIR... [-- OPTION VALUE ...]

RUN_DIR... may hold the script's own options that name runs or their labels
(--pair BASE METHOD, --with-cache RUN, --without-cache RUN, --label NAME),
exactly as the script was given them.
The expectations are computed here from the trace files with json and csv
alone, not with plots/eptrace.py, so a reader bug cannot hide itself. Prints
one line per failed check; exits 1 if any failed.
"""
import csv
import json
import math
import os
import re
import sys

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


def summary(run):
    with open(os.path.join(run, "summary.json")) as f:
        return json.load(f)


def epochs(run, mode):
    with open(os.path.join(run, "epochs.csv")) as f:
        return sorted((r for r in csv.DictReader(f) if r["mode"] == mode), key=lambda r: int(r["epoch"]))


def modes(run):
    return [m["mode"] for m in summary(run)["modes"]]


def main_mode(run):
    return "autocache" if "autocache" in modes(run) else modes(run)[-1]


def close(a, b):
    """Equal lists of numbers, to rounding; None (not measured) equals only None."""
    return len(a) == len(b) and all(x == y if None in (x, y) else math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)
                                    for x, y in zip(a, b))


def check_common(fig):
    check(bool(fig.get("title")), "title is empty")
    for i, p in enumerate(fig["panels"]):
        for axis in ("xlabel", "ylabel"):
            check(re.search(r"\S.*\(.+\)", p.get(axis, "")), f"panel {i}: {axis} {p.get(axis)!r} has no unit in parentheses")
        for s in p["series"]:
            n = len(s["x"])
            check(len(s["y"]) == n, f"panel {i}: series {s['label']!r}: {n} x, {len(s['y'])} y")
            for k in ("width", "text"):
                check(k not in s or len(s[k]) == n, f"panel {i}: series {s['label']!r}: {len(s.get(k, []))} {k}, {n} x")


def series_of(fig, panel=0):
    return fig["panels"][panel]["series"]


def check_freeze_curve(fig, runs, _):
    alpha = lambda r: float(summary(r)["metadata"]["alpha"])
    runs = sorted(runs, key=alpha)
    got = series_of(fig)
    if check(len(got) == len(runs), f"{len(got)} series for {len(runs)} run dirs"):
        for s, run in zip(got, runs):
            rows = epochs(run, main_mode(run))
            inside = [r.get("frozen_inside", "-") for r in rows]  # layers frozen past the prefix
            frozen = [int(r["frozen_layers"]) + (0 if i == "-" else len(i.split())) for r, i in zip(rows, inside)]
            check(s["y"] == frozen, f"{s['label']}: y is not the frozen layers of {run}")
            check(f"{alpha(run):.2g}" in s["label"], f"{s['label']}: does not name α = {alpha(run)}")


def only_mode(run):
    """The one mode of a train run's summary."""
    ms = summary(run)["modes"]
    check(len(ms) == 1, f"{run}: {len(ms)} modes, expected a train run's one")
    return ms[0]


def check_overall_table(fig, runs, opts):
    pairs = opts.get("pair", [])
    n = len(runs) + len(pairs)
    got = series_of(fig)
    check(len(got) == 2 and all(len(s["y"]) == n for s in got), "expected 2 series of one bar per run or pair")
    rows = fig["table"]["rows"]
    check(len(rows) == n, "expected one table row per run or pair")
    want = [next(m["total_s"] for m in summary(r)["modes"] if m["mode"] == main_mode(r)) for r in runs]
    want += [only_mode(method)["total_s"] for _, method in pairs]
    check(close(got[1]["y"], want), f"ElasticPipe times {got[1]['y']} != summaries' {want}")
    # A pair's row: the two runs' measured total times, their ratio and
    # their final accuracies, as each summary.json has them.
    for row, (base, method) in zip(rows[len(runs):], pairs):
        b, m = only_mode(base), only_mode(method)
        want = [b["total_s"], m["total_s"], b["total_s"] / m["total_s"], b["final_accuracy"], m["final_accuracy"]]
        check(close(row[2:7], want), f"--pair {base} {method}: times, speedup, accuracies {row[2:7]} != {want}")
        check(row[1] == m["mode"] and row[-1] == summary(method)["source"], f"--pair {base} {method}: row {row}")


def check_speedup_breakdown(fig, runs, opts):
    if len(runs) > 1 or "label" in opts:
        return check_measured_breakdown(fig, runs, opts.get("label"))
    run = runs[0]
    lines = series_of(fig, 0)
    check(len(lines) == len(modes(run)), f"{len(lines)} throughput series, expected one per mode {modes(run)}")
    for s, mode in zip(lines, modes(run)):
        check(close(s["y"], [float(r["samples_per_s"]) for r in epochs(run, mode)]), f"{mode}: y != samples_per_s")
    # Speedup bars only when there is a reference to be faster than (an executor run has none).
    if summary(run)["reference"] is not None:
        check(len(modes(run)) == 7, "a simulated run has the seven modes")
        bars = series_of(fig, 1)
        check(close(bars[0]["y"], [m["speedup"] for m in summary(run)["modes"]]), "speedup bars != summary speedups")
    else:
        check(len(fig["panels"]) == 1, "no speedup panel without a reference")


def check_measured_breakdown(fig, runs, labels):
    """Train runs, one line each, and speedups over the first in total time."""
    labels = labels or [os.path.basename(os.path.abspath(r)) for r in runs]
    lines = series_of(fig, 0)
    check([s["label"] for s in lines] == labels, f"lines {[s['label'] for s in lines]}, expected {labels}")
    for s, run in zip(lines, runs):
        rows = epochs(run, only_mode(run)["mode"])
        check(s["x"] == [int(r["epoch"]) for r in rows] and close(s["y"], [float(r["samples_per_s"]) for r in rows]),
              f"{s['label']}: x, y != epoch, samples_per_s of {run}")
    if len(runs) == 1:
        check(len(fig["panels"]) == 1, "no speedup panel for one run")
        return
    bars = series_of(fig, 1)
    totals = [only_mode(r)["total_s"] for r in runs]
    check(len(bars) == 1 and bars[0]["x"] == labels, "expected one bar per run, named as its line")
    check(close(bars[0]["y"], [totals[0] / t for t in totals]), f"speedups {bars[0]['y']} != {totals[0]} / {totals}")


def check_alpha_tuning(fig, runs, _):
    got = series_of(fig)
    want = sorted(float(summary(r)["metadata"]["alpha"]) for r in runs)
    check(len(got) == 1 and close(got[0]["x"], want), f"expected one series over α = {want}")


def check_optimal_chunks(fig, runs, _):
    with open(os.path.join(runs[0], "chunks.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["mode"] == "autocache"]
    Ks = list(dict.fromkeys(r["K"] for r in rows))
    got = series_of(fig)
    if check(len(got) == len(Ks), f"{len(got)} series for K = {Ks}"):
        for s, K in zip(got, Ks):
            pts = [r for r in rows if r["K"] == K]
            check(s["x"] == [int(r["M"]) for r in pts], f"K = {K}: x != the M of chunks.csv")
            chosen = [i for i, r in enumerate(pts) if r["chosen"] == "1"]
            check(s.get("marked") == chosen, f"K = {K}: marked {s.get('marked')} != chosen {chosen}")


def check_cache_timing(fig, runs, opts):
    got = series_of(fig)
    if "with-cache" in opts:
        dirs = opts["with-cache"] + opts["without-cache"]
        check(len(got) == 2, f"{len(got)} series, expected with and without the cache")
        for s, run, what in zip(got, dirs, ("with cache", "without cache")):
            rows = epochs(run, only_mode(run)["mode"])
            check(s["x"] == [int(r["epoch"]) for r in rows] and close(s["y"], [float(r["samples_per_s"]) for r in rows]),
                  f"{s['label']}: x, y != epoch, samples_per_s of {run}")
            check(s["label"] == f"{what} ({os.path.basename(os.path.abspath(run))})", f"{s['label']}: not '{what} (folder)'")
        return
    n = len(epochs(runs[0], "autocache"))
    check(len(got) == 2 and all(len(s["y"]) == n for s in got), f"expected 2 series of {n} epochs")


def check_comm_compute_table(fig, runs, _):
    run = runs[0]
    compute = []
    for mode in modes(run):
        compute.append(sum(float(r["compute_s"]) * (float(r["epoch_s"]) - float(r["transition_s"]))
                           / float(r["iteration_s"]) for r in epochs(run, mode)))
    got = series_of(fig)
    check(len(got) == 2, f"{len(got)} stacked series, expected computation and communication")
    check(close(got[0]["y"], compute), f"computation {got[0]['y']} != {compute}")
    check(len(fig["table"]["rows"]) == len(modes(run)), "expected one table row per mode")


def trace_events(run):
    with open(os.path.join(run, "trace.json")) as f:
        doc = json.load(f)
    threads = {e["tid"]: e["args"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    return [e for e in doc["traceEvents"] if e["ph"] == "X"], threads


def check_transition_table(fig, runs, _):
    events, threads = trace_events(runs[0])
    keys = {(e["name"], e["args"].get("plan_id"), e["args"].get("epoch")) for e in events
            if e["cat"] == "transition" and (e["name"] == "start" or e["name"].startswith("transition"))
            and threads[e["tid"]]["kind"] == "gpu"}
    rows = fig["table"]["rows"]
    check(len(rows) == len(keys), f"{len(rows)} table rows for {len(keys)} transitions")
    for row in rows:
        check(math.isclose(sum(row[1:-1]), row[-1], abs_tol=1e-6), f"{row[0]}: parts do not add up to the total")
        # The simulator writes every part of its transitions: none is "other"
        # (the parts stay on their transition's track in trace.json).
        if summary(runs[0])["source"] == "sim":
            check(abs(row[-2]) < 1e-6 * max(1.0, row[-1]), f"{row[0]}: {row[-2]} s of 'other' in a simulated transition")
    check(len(series_of(fig)) == 7, "expected the parts cache probe, cache file, weights, contexts, ddp, warmup, other")


DRAWN = ("forward", "backward", "frozen_forward", "cache_read", "cache_write", "optimizer")


def check_timeline(fig, runs, opts):
    events, threads = trace_events(runs[0])
    drawn = [e for e in events if e["cat"] in DRAWN
             and threads[e["tid"]]["kind"] == "gpu" and threads[e["tid"]]["lane"] == 0]
    for key in ("plan_id", "replica", "epoch", "iteration"):  # the script's defaults: the first present
        value = int(opts.get(key, min(e["args"].get(key, -1) for e in drawn)))
        drawn = [e for e in drawn if e["args"].get(key, -1) == value]
    drawn = [e for e in drawn if e["cat"] in ("forward", "backward")]
    boxes = sum(len(s["x"]) for s in series_of(fig) if s["label"] in ("forward", "backward"))
    check(drawn and boxes == len(drawn), f"{boxes} forward/backward boxes for {len(drawn)} spans")
    rows = fig["panels"][0]["yticks"]
    check(len(rows) == len({e["tid"] for e in drawn}), f"{len(rows)} rows for {len({e['tid'] for e in drawn})} GPUs")


def check_where_it_pays(fig, runs, _):
    with open(os.path.join(runs[0], "points.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    models = list(dict.fromkeys(r["model"] for r in rows))
    check(len(fig["panels"]) == len(models), f"{len(fig['panels'])} panels for models {models}")
    for panel, model in zip(fig["panels"], models):
        check(panel["title"] == model, f"panel {panel['title']!r} is not {model!r}")
        lengths = sorted({int(r["epochs"]) for r in rows if r["model"] == model})
        if not check(len(panel["series"]) == len(lengths), f"{model}: {len(panel['series'])} series for {lengths}"):
            continue
        for s, epochs in zip(panel["series"], lengths):
            line = sorted((r for r in rows if r["model"] == model and int(r["epochs"]) == epochs),
                          key=lambda r: int(r["gpus"]))
            shown = [r for r in line if r["speedup"] != ""]
            check(s["x"] == [int(r["gpus"]) for r in shown], f"{s['label']}: x != the gpus with a speedup")
            check(close(s["y"], [float(r["speedup"]) for r in shown]), f"{s['label']}: y != the speedups")
            # The crossover: the first cluster whose speedup shows as 1.000 or less.
            first = next((i for i, r in enumerate(shown) if float(f"{float(r['speedup']):.3f}") <= 1.0), None)
            check(s.get("marked", []) == ([] if first is None else [first]),
                  f"{s['label']}: marked {s.get('marked')}, crossover at index {first}")
            want = "pays everywhere" if first is None else f"{int(shown[first]['gpus']):,} GPUs"
            check(want in s["label"], f"{s['label']}: does not say {want!r}")
            hollow = [i for i, r in enumerate(shown) if r["method_fits"] == "0"]
            check(s.get("faded", []) == hollow, f"{s['label']}: faded {s.get('faded')} != {hollow}")
    sizes = {(r["model"], r["gpus"]) for r in rows}
    check(len(fig["table"]["rows"]) == len(sizes), f"{len(fig['table']['rows'])} table rows for {len(sizes)} sizes")


# The scripts' options that name runs or labels, and how many values each takes.
RUN_OPTIONS = {"--pair": 2, "--with-cache": 1, "--without-cache": 1, "--label": 1}


def split_runs(argv):
    """The run folders, and opts[option] = a list of each use's value (a
    list of values for --pair)."""
    runs, opts, i = [], {}, 0
    while i < len(argv):
        n = RUN_OPTIONS.get(argv[i])
        if n is None:
            runs.append(argv[i])
            i += 1
        else:
            values = argv[i + 1:i + 1 + n]
            opts.setdefault(argv[i][2:], []).append(values if n > 1 else values[0])
            i += 1 + n
    return runs, opts


def main():
    argv = sys.argv[1:]
    opts = {}
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
        opts = dict(zip(extra[::2], extra[1::2]))
    name, describe = argv[0], argv[1]
    runs, named = split_runs(argv[2:])
    opts.update(named)
    with open(describe) as f:
        fig = json.load(f)
    check_common(fig)
    globals()["check_" + name](fig, runs, opts)
    for what in failures:
        print(f"  {name}: {what}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
