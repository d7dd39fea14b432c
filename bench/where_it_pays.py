#!/usr/bin/env python3
"""Where the method pays: the full method's simulated speedup (mode
autocache) over the best static plan (mode baseline) against cluster size
and training length.

    python3 bench/where_it_pays.py [--bin ELASTICPIPE] [--out DIR] [--config FILE ...]
        [--nodes 2,4,...,1024] [--epochs 3,10,30,90] [--gpus-per-node 8] [--jobs N]
        [--set KEY=VALUE ...] [--smoke]

For each config (default: ViT-B/16 on ImageNet-1k and BERT-large on SQuAD
v1.1, both on DGX H100 nodes, configs/scale/) and each training length, one
`elasticpipe sweep` over cluster.nodes with modes baseline,autocache: every
point a whole simulated training. Each length keeps about ten freeze steps:
planner.freeze_interval_epochs = max(1, epochs // 10). With the configs'
batch_policy "global" the global batch is batch_size x the nodes (one
pipeline of K = 8 a node), so a larger cluster trains the same data in
fewer, larger updates; both modes train the same global batch and updates.

Writes DIR/points.csv (bench/where_it_pays_table.py says what each
column holds), each sweep's folder DIR/sweeps/NAME_eEPOCHS/ and its log
under DIR/logs/, and prints the table, each line's crossover (the smallest
cluster from which the method stops paying) and each sweep's wall time.
Draw it with plots/where_it_pays.py DIR --out FILE.png. The binary: --bin,
else $EP_BIN, else build/elasticpipe. --smoke runs two cluster sizes, one
length and a small data set in seconds: it checks the bench, not the
numbers. Bad arguments: one ERROR line, exit 2.
"""
import argparse
import csv
import os
import sys
import time
from pathlib import Path

from bench_runs import ROOT, Runner, check_binary, fail, run_main, with_sets
from where_it_pays_table import crossover, lines_of, write_results

# (name in the table and figure, config)
MODELS = [("ViT-B/16, ImageNet-1k", "configs/scale/vit_imagenet_dgx_h100.toml"),
          ("BERT-large, SQuAD v1.1", "configs/scale/bert_large_dgx_h100.toml")]
NODES = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
EPOCHS = [3, 10, 30, 90]
SMOKE_NODES, SMOKE_EPOCHS, SMOKE_SAMPLES = [2, 4], [3], 4096
MAX_GPUS = 8192  # the planner's limit (cluster.nodes x cluster.gpus_per_node)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one ERROR line, not argparse's usage dump
        fail(f"{self.prog}: {message}")


def int_list(text):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, found '{text}'") from None
    if any(v < 1 for v in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct integers >= 1, found '{text}'")
    return sorted(values)


def parse_args():
    ap = _Parser(prog="where_it_pays.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get("EP_BIN", str(ROOT / "build" / "elasticpipe")),
                    help="the elasticpipe binary (default $EP_BIN, else build/elasticpipe)")
    ap.add_argument("--out", default=str(ROOT / "out" / "where_it_pays"), help="output folder")
    ap.add_argument("--config", action="append", default=[], metavar="FILE",
                    help="a config to sweep instead of the two defaults (repeat for more); named by its file")
    ap.add_argument("--nodes", type=int_list, default=NODES, help="cluster.nodes values, comma-separated")
    ap.add_argument("--epochs", type=int_list, default=EPOCHS, help="training.epochs values, comma-separated")
    ap.add_argument("--gpus-per-node", type=int, default=8, help="cluster.gpus_per_node (default 8: a DGX node)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="points simulated at once (sweep --jobs)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every point")
    ap.add_argument("--smoke", action="store_true", help="two sizes, one length, a small data set: seconds")
    a = ap.parse_args()
    if a.smoke:
        a.nodes, a.epochs = SMOKE_NODES, SMOKE_EPOCHS
        a.sets = [f"data.num_train_samples={SMOKE_SAMPLES}"] + a.sets
    if not 1 <= a.jobs <= 256:
        fail(f"--jobs {a.jobs}: expected 1 to 256")
    if not 1 <= a.gpus_per_node <= 256:
        fail(f"--gpus-per-node {a.gpus_per_node}: expected 1 to 256")
    if a.nodes[-1] * a.gpus_per_node > MAX_GPUS:
        fail(f"--nodes {a.nodes[-1]} x --gpus-per-node {a.gpus_per_node}: more than the planner's {MAX_GPUS} GPUs")
    for s in a.sets:
        key, eq, _ = s.partition("=")
        if not eq or "." not in key:
            fail(f"--set {s!r}: expected section.key=value")
        if key.strip() in ("cluster.nodes", "cluster.gpus_per_node", "training.epochs",
                           "planner.freeze_interval_epochs"):
            fail(f"--set {s!r}: the bench sets {key.strip()} itself (--nodes, --gpus-per-node, --epochs)")
    models = [(Path(c).stem, c) for c in a.config] or [(name, str(ROOT / c)) for name, c in MODELS]
    for _, config in models:
        if not os.path.isfile(config):
            fail(f"--config {config}: no such file")
    check_binary(a.bin)
    return a, models


def sweep(runner, a, name, config, epochs):
    """One sweep of cluster.nodes at one training length: its rows and wall time."""
    interval = max(1, epochs // 10)
    folder = Path(a.out) / "sweeps" / f"{Path(config).stem}_e{epochs}"
    cmd = with_sets([a.bin, "sweep", config, "--mode", "baseline,autocache", "--jobs", str(a.jobs),
                     "--out", str(folder), "--set", "cluster.nodes=" + ",".join(map(str, a.nodes))],
                    [f"cluster.gpus_per_node={a.gpus_per_node}", f"training.epochs={epochs}",
                     f"planner.freeze_interval_epochs={interval}"] + a.sets)
    _, wall = runner.run(f"{Path(config).stem}_e{epochs}", cmd)
    with open(folder / "sweep.csv", encoding="utf-8", newline="") as f:
        points = list(csv.DictReader(f))
    rows = []
    for p in points:
        try:
            number = lambda c: float(p[c]) if p[c] != "" else None
            row = {"model": name, "config": os.path.relpath(config, ROOT), "nodes": int(p["cluster.nodes"]),
                   "epochs": epochs, "freeze_interval_epochs": interval, "baseline_s": number("baseline_total_s"),
                   "method_s": number("autocache_total_s"), "speedup": number("autocache_speedup"),
                   "baseline_fits": p["baseline_fits"] == "1", "method_fits": p["autocache_fits"] == "1",
                   "global_batch": int(p["baseline_global_batch"]), "updates": int(p["baseline_updates"])}
        except (KeyError, ValueError) as e:
            fail(f"{folder}/sweep.csv: unexpected row {p}: {e}")
        row["gpus"] = row["nodes"] * a.gpus_per_node
        if (p["autocache_global_batch"], p["autocache_updates"]) != (p["baseline_global_batch"], p["baseline_updates"]):
            print(f"WARNING: {name}, {row['gpus']} GPUs, {epochs} epochs: the method trains global batch "
                  f"{p['autocache_global_batch']} x {p['autocache_updates']} updates, the baseline "
                  f"{p['baseline_global_batch']} x {p['baseline_updates']}", file=sys.stderr)
        rows.append(row)
    return rows, wall


def report(rows, walls, a):
    out = ["| model | GPUs | epochs | baseline (s) | method (s) | speedup | global batch | updates |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        speedup = "—" if r["speedup"] is None else f"{r['speedup']:.3f}×"
        if not r["baseline_fits"] or not r["method_fits"]:
            speedup += " (" + ", ".join(m for m, fits in (("baseline", r["baseline_fits"]),
                                                          ("method", r["method_fits"])) if not fits) + " does not fit)"
        out.append(f"| {r['model']} | {r['gpus']:,} | {r['epochs']} | {r['baseline_s']:.1f} | {r['method_s']:.1f} "
                   f"| {speedup} | {r['global_batch']:,} | {r['updates']:,} |")
    out += ["", "Crossover (the smallest cluster from which the speedup, to three decimals, is 1.000 or less):"]
    for (model, epochs), line in lines_of(rows).items():
        c = crossover(line)
        out.append(f"- {model}, {epochs} epochs: " + ("pays everywhere" if c is None else
                                                     f"{c['gpus']:,} GPUs ({c['speedup']:.3f}×)"))
    out += ["", "Wall time per sweep (--jobs {}):".format(a.jobs)]
    out += [f"- {name}: {wall:.0f} s for {n} points" for name, wall, n in walls]
    return "\n".join(out)


def main():
    a, models = parse_args()
    t0 = time.perf_counter()
    runner = Runner(a.out)
    rows, walls = [], []
    try:
        for name, config in models:
            for epochs in a.epochs:
                got, wall = sweep(runner, a, name, config, epochs)
                rows += got
                walls.append((f"{name}, {epochs} epochs", wall, len(got)))
    finally:
        runner.close()
    path = Path(a.out) / "points.csv"
    write_results(path, rows)
    print(report(rows, walls, a))
    print(f"\nwall time {time.perf_counter() - t0:.0f} s; wrote {path}")


if __name__ == "__main__":
    run_main(main)
