#!/usr/bin/python3
"""Time to accuracy: how long until each way of training reaches the accuracy
a user needs, on the same data, epochs, seeds and model, each run alone.

    /usr/bin/python3 bench/bench_tta.py [--only NAME,...] [--workload finetune|scratch|all]
                                        [--bin DIR] [--out DIR] [--nproc N] [--set KEY=VALUE]...

Workloads (configs/finetune/): `finetune` starts from the weights that
pretrain.toml trains (made first, once, under OUT/pretrain); `scratch` is the
same task from the seed's weights. Runs:

  plain      plain LibTorch loop, one process (build/plain_train)
  dp         pure data parallelism: NPROC processes, K = 1, no freezing,
             batch_size per process (what DDP users often run)
  dp_global  the same, the processes splitting the config's batch_size (the same
             global batch and updates as plain and gpipe)
  gpipe      GPipe K = NPROC + DDP, no freezing (the paper's baseline)
  ep_paper   ElasticPipe with the paper's decisions (objective = "paper")
  ep_time    ElasticPipe with the planner's time objective
  ep_paper_lr, ep_time_lr           the same with training.batch_policy = "lr_scaled"
  ep_paper_global, ep_time_global   the same with training.batch_policy = "global"
  ep_one     ElasticPipe on one device, one process (K = 1): freezing and
             AutoCache, no pipeline and no replicas: the same updates as plain

Wall time is the process's, from its start to the line that reports an
epoch's test accuracy (start-up, chunk search and evaluation included). The
target is the GPipe baseline's final accuracy minus 0.5 points. --set is
passed to every run (e.g. a quick check on a slice of the data:
--set data.num_train_samples=512 --set training.epochs=2). Writes
OUT/tta.csv (every epoch of every run), OUT/tta_summary.csv, OUT/tta.md (the
table) and OUT/tta.png (test accuracy against wall time, one curve per run).
"""
import argparse
import csv
import os
import re
import subprocess
import sys
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EPOCH = re.compile(r"^epoch (\d+)/(\d+)\s.*acc ([0-9.]+)%")
RUNS = ["plain", "dp", "dp_global", "gpipe", "ep_paper", "ep_time", "ep_paper_lr", "ep_time_lr",
        "ep_paper_global", "ep_time_global", "ep_one"]
DESCRIBE = {
    "plain": "plain LibTorch loop, 1 process",
    "dp": "pure DP: {n} processes, K = 1, no freezing",
    "dp_global": "pure DP, {n} processes splitting the global batch",
    "gpipe": "GPipe K = {n} + DDP, no freezing",
    "ep_paper": "ElasticPipe, paper's decisions",
    "ep_time": "ElasticPipe, time objective",
    "ep_paper_lr": "ElasticPipe, paper's decisions, lr_scaled",
    "ep_time_lr": "ElasticPipe, time objective, lr_scaled",
    "ep_paper_global": "ElasticPipe, paper's decisions, global batch",
    "ep_time_global": "ElasticPipe, time objective, global batch",
    "ep_one": "ElasticPipe, 1 process, K = 1, freezing and AutoCache",
}


def sets(*pairs):
    out = []
    for p in pairs:
        out += ["--set", p]
    return out


def config_batch(cfg, overrides):
    """training.batch_size as the runs see it: the last --set of it, else the file's."""
    for o in reversed(overrides):
        key, _, value = o.partition("=")
        if key.strip() == "training.batch_size":
            return int(value)
    with open(cfg, "rb") as f:
        return tomllib.load(f)["training"]["batch_size"]


def last_set_wins(argv):
    """argv with each --set key once, at its last value: elasticpipe refuses a
    key given twice, and a run's own --set and the caller's may name one."""
    key = lambda i: argv[i + 1].partition("=")[0].strip()  # noqa: E731
    last = {key(i): i for i in range(len(argv) - 1) if argv[i] == "--set"}
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--set" and i + 1 < len(argv) and last[key(i)] != i:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def command(run, cfg, workload, bindir, nproc, pretrained, overrides):
    """The run's command line; `overrides` (--set KEY=VALUE) go to every run."""
    return last_set_wins(base_command(run, cfg, workload, bindir, nproc, pretrained) + sets(*overrides) + (
        # batch_size is per pipeline at planner.K; at K = 1 the processes split the batch.
        sets("training.batch_size=%d" % max(1, config_batch(cfg, overrides) // nproc)) if run == "dp_global" else []))


def base_command(run, cfg, workload, bindir, nproc, pretrained):
    ep = os.path.join(bindir, "elasticpipe")
    init = (sets('training.init_weights="%s"' % pretrained) if workload == "finetune"
            else sets('training.init_weights=""', "training.init_keep=[]"))
    multi = ["--nproc", str(nproc)] + sets("cluster.gpus_per_node=%d" % nproc, "planner.autodp=true")
    no_freeze = sets('planner.freeze_policy="none"')
    if run == "plain":
        return [os.path.join(bindir, "plain_train"), cfg] + init
    if run == "ep_one":
        return [ep, "train", cfg] + sets("cluster.gpus_per_node=1", "planner.K=1", "planner.autodp=false") + init
    if run in ("dp", "dp_global"):
        return [ep, "train", cfg] + multi + no_freeze + sets("planner.K=1", 'planner.compression="none"') + init
    if run == "gpipe":
        # objective "paper" keeps K = K_0 (the time objective would pick K and replicas itself).
        return [ep, "train", cfg] + multi + no_freeze + init + sets(
            'planner.objective="paper"', "planner.K=%d" % nproc, 'planner.schedule="gpipe"')
    objective = "paper" if run.startswith("ep_paper") else "time"
    extra = sets('planner.objective="%s"' % objective, "planner.K=%d" % nproc)
    if objective == "paper":
        extra += sets('planner.schedule="gpipe"', 'planner.compression="memory"')
    if run.endswith("_lr"):
        extra += sets('training.batch_policy="lr_scaled"')
    if run.endswith("_global"):
        extra += sets('training.batch_policy="global"')
    return [ep, "train", cfg] + multi + extra + init


def run_one(cmd, out_dir, log_path):
    """Runs cmd, stamping every epoch line with the wall time since the start."""
    if "elasticpipe" in os.path.basename(cmd[0]):
        cmd = cmd + ["--out", out_dir]
    rows = []
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, cwd=ROOT)
        for line in p.stdout:
            log.write(line)
            m = EPOCH.match(line)
            if m:
                rows.append((int(m.group(1)), time.monotonic() - t0, float(m.group(3))))
                print("    epoch %s/%s  acc %s%%  %.1f s" % (m.group(1), m.group(2), m.group(3), rows[-1][1]),
                      flush=True)
        rc = p.wait()
    total = time.monotonic() - t0
    if rc != 0:
        sys.exit("bench_tta: %s failed (exit %d); its output is in %s" % (" ".join(cmd), rc, log_path))
    return rows, total


def pretrain(bindir, out):
    weights = os.path.join(out, "pretrain", "weights.bin")
    if os.path.exists(weights):
        print("pretrained weights: %s (reused)" % weights, flush=True)
        return weights
    print("pretraining (configs/finetune/pretrain.toml) ...", flush=True)
    cmd = [os.path.join(bindir, "elasticpipe"), "train", os.path.join(ROOT, "configs/finetune/pretrain.toml")]
    run_one(cmd, os.path.join(out, "pretrain"), os.path.join(out, "pretrain.log"))
    return weights


def time_to(rows, target):
    for epoch, wall, acc in rows:
        if acc >= target:
            return wall
    return None


def plot(results, targets, path, workloads):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench_tta: no matplotlib for %s (Debian: apt install python3-matplotlib; run with /usr/bin/python3)"
              % sys.executable)
        return
    fig, axes = plt.subplots(1, len(workloads), figsize=(6.5 * len(workloads), 4.5), squeeze=False)
    # One colour and marker per run, the same in every panel: more runs than
    # matplotlib's 10-colour cycle, which would give two runs one colour.
    # tab20 holds 10 hues in (dark, light) pairs: the dark ones first.
    names = list(RUNS)
    colours = plt.get_cmap("tab20").colors
    markers = "osD^vP*Xdh<>"
    for ax, w in zip(axes[0], workloads):
        for r in results:
            if r["workload"] != w:
                continue
            i = names.index(r["run"])
            ax.plot([wall for _, wall, _ in r["rows"]], [acc for _, _, acc in r["rows"]], label=r["run"],
                    color=colours[(2 * i + i // 10) % 20], marker=markers[i % len(markers)])
        if targets.get(w) is not None:
            ax.axhline(targets[w], color="grey", linestyle="--", linewidth=1, label="target %.2f%%" % targets[w])
        ax.set_title(w)
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print("wrote %s" % path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated runs (default: all): " + ",".join(RUNS))
    ap.add_argument("--workload", default="all", choices=["finetune", "scratch", "all"])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build"), help="directory with elasticpipe and plain_train")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "tta"))
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to every run")
    a = ap.parse_args()
    runs = [r for r in a.only.split(",") if r] or RUNS
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        ap.error("unknown run %s; runs: %s" % (",".join(unknown), ",".join(RUNS)))
    for tool in ("elasticpipe", "plain_train"):
        if not os.access(os.path.join(a.bin, tool), os.X_OK):
            sys.exit("bench_tta: no %s in %s (bash scripts/setup.sh builds both)" % (tool, a.bin))
    workloads = ["finetune", "scratch"] if a.workload == "all" else [a.workload]
    os.makedirs(a.out, exist_ok=True)
    cfg = os.path.join(ROOT, "configs/finetune/finetune.toml")
    weights = pretrain(a.bin, a.out) if "finetune" in workloads else None
    results = []
    start = time.monotonic()
    for w in workloads:
        for run in runs:
            print("[%s] %s: %s" % (w, run, DESCRIBE[run].format(n=a.nproc)), flush=True)
            name = "%s_%s" % (w, run)
            cmd = command(run, cfg, w, a.bin, a.nproc, weights, a.set)
            rows, total = run_one(cmd, os.path.join(a.out, name), os.path.join(a.out, name + ".log"))
            results.append({"workload": w, "run": run, "rows": rows, "total": total})
            print("    done in %.1f s (%.0f s since the start)" % (total, time.monotonic() - start), flush=True)
    # Target per workload: the GPipe baseline's final accuracy minus 0.5 points.
    targets = {r["workload"]: r["rows"][-1][2] - 0.5 for r in results if r["run"] == "gpipe" and r["rows"]}
    for r in results:
        r["target"] = targets.get(r["workload"])
    with open(os.path.join(a.out, "tta.csv"), "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["workload", "run", "epoch", "wall_s", "test_accuracy"])
        for r in results:
            for epoch, wall, acc in r["rows"]:
                wr.writerow([r["workload"], r["run"], epoch, "%.2f" % wall, "%.2f" % acc])
    lines = ["| workload | run | final accuracy | time to target | total time |", "| --- | --- | --- | --- | --- |"]
    with open(os.path.join(a.out, "tta_summary.csv"), "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["workload", "run", "final_accuracy", "target", "time_to_target_s", "total_s"])
        for r in results:
            final = r["rows"][-1][2] if r["rows"] else None
            tt = time_to(r["rows"], r["target"]) if r["target"] is not None else None
            wr.writerow([r["workload"], r["run"], final, "" if r["target"] is None else "%.2f" % r["target"],
                         "" if tt is None else "%.1f" % tt, "%.1f" % r["total"]])
            lines.append("| %s | %s | %s | %s | %.1f s |" % (
                r["workload"], DESCRIBE[r["run"]].format(n=a.nproc), "%.2f%%" % final if final is not None else "-",
                ("%.1f s" % tt) if tt is not None else ("not reached" if r["target"] is not None else "-"),
                r["total"]))
    table = "\n".join(lines)
    note = "".join("\ntarget (%s): %.2f%% (GPipe's final minus 0.5 points)" % (w, t) for w, t in targets.items())
    with open(os.path.join(a.out, "tta.md"), "w") as f:
        f.write(table + "\n" + note + "\n")
    print(table + note)
    plot(results, targets, os.path.join(a.out, "tta.png"), workloads)


if __name__ == "__main__":
    main()
