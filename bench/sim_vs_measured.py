#!/usr/bin/env python3
"""The simulator against the machine it profiled: `profile` on this machine,
`simulate --profile` of the config, then `train` runs of the same config,
each compared with the simulation epoch by epoch (`trace diff --csv`), and
`validate` with that profile.

    python3 bench/sim_vs_measured.py [OUT] [--config FILE] [--rounds 1] [--mode configured]
        [--tolerance 5] [--traced-iterations N] [--no-validate] [--validate-iterations 3]
        [--set k=v ...] [--smoke] [--bin ELASTICPIPE]

Each round trains three ways, in this order, because each meets the
process's one-off work (CUDA context, kernels, allocator growth) in another
place:
  first       no chunk memo (OUT/chunk_memo.json removed): the chunk search
              runs before epoch 1 and pays the one-off work there;
  traced      every action of every iteration traced (exec.trace_iterations;
              --traced-iterations), the memo present: what `trace diff` needs
              per action, at the tracing's cost;
  configured  the config as given, the memo present: the usual run.
The simulated mode (--mode, default configured: the config exactly as train
runs it) is the one compared with the runs. OUT (default /tmp/sim-vs-measured) gets
profile.json, sim/, runs/NAME/{epochs.csv,trace.json,transitions.json,
diff.csv}, logs/, summary.csv (every run's diff.csv rows with the run's
name) and table.md (printed). The binary: --bin, else $EP_BIN, else
$EP_BUILD/elasticpipe, else build/elasticpipe. --smoke runs a tiny model on
the CPU in seconds: it checks the bench, not the numbers.
"""
import argparse
import csv
import os
import re
import sys
import time
from pathlib import Path

from bench_runs import ROOT, SMOKE_SETS, Runner, check_binary, fail, run_main, with_sets
from config_set import load_config

KINDS = ("first", "traced", "configured")
KEEP = ("epochs.csv", "trace.json", "transitions.json")
CHUNK_SEARCH_NOTE = re.compile(r"^second: its chunk search ran in its start \(([0-9.eE+-]+) s\)", re.M)


def number(text):
    return float(text) if text != "" else None


def signed_percent(v):
    return f"{100 * v:+.1f}%"


class Bench(Runner):
    def __init__(self, a):
        super().__init__(a.out)
        self.a = a
        self.memo = self.out / "chunk_memo.json"

    def ep(self, *args):
        """An elasticpipe command other than train, with the config's overrides."""
        return with_sets([self.a.bin, *args], self.a.sets)

    def simulate(self):
        profile = self.out / "profile.json"
        self.run("profile", self.ep("profile", self.a.config, "--out", str(profile)))
        self.run("simulate", self.ep("simulate", self.a.config, "--profile", str(profile), "--mode", self.a.mode,
                                     "--out", str(self.out / "sim")))
        return profile

    def measured(self, name, kind):
        sets = [f'exec.chunk_memo="{self.memo}"'] + self.a.sets
        if kind == "first":
            self.memo.unlink(missing_ok=True)
        if kind == "traced":
            sets.append(f"exec.trace_iterations={self.a.traced_iterations}")
        kept = self.train(name, self.a.bin, self.a.config, sets, KEEP)
        diff_csv = kept / "diff.csv"
        text, _ = self.run(f"diff_{name}", [self.a.bin, "trace", "diff", str(self.out / "sim" / "trace.json"),
                                            str(kept / "trace.json"), "--csv", str(diff_csv)])
        with open(diff_csv, newline="") as f:
            rows = list(csv.DictReader(f))
        search = CHUNK_SEARCH_NOTE.search(text)
        return {"name": name, "kind": kind, "rows": rows, "chunk_search_s": float(search[1]) if search else None}

    def rounds(self):
        runs = []
        for r in range(1, self.a.rounds + 1):
            print(f"round {r} of {self.a.rounds}", file=sys.stderr, flush=True)
            for kind in KINDS:
                runs.append(self.measured(f"{kind}_r{r}", kind))
        return runs

    def validate(self, profile):
        text, _ = self.run("validate", self.ep("validate", self.a.config, "--profile", str(profile), "--iterations",
                                               str(self.a.validate_iterations), "--rounds", "1"))
        return text


def table(runs, title, column, scale, digits):
    """One markdown table: a row per epoch (then `start` and `all` where the
    diff has them), the simulated value, each run's measured one and error."""
    md = [f"### {title}\n", "| epoch | frozen | simulated | " + " | ".join(r["name"] for r in runs) + " |",
          "| ---: | ---: | ---: | " + " | ".join("---:" for _ in runs) + " |"]
    labels = list(dict.fromkeys(row["row"] for r in runs for row in r["rows"]))  # in order, each once
    for label in labels:
        cells, simulated, frozen = [], None, ""
        for r in runs:
            row = next((x for x in r["rows"] if x["row"] == label), None)
            first, second = (number(row[f"first{column}"]), number(row[f"second{column}"])) if row else (None, None)
            if first is None or second is None:
                cells.append("")
                continue
            simulated = first
            if row["frozen_first"]:
                f, s = frozen_set(row, "first"), frozen_set(row, "second")
                frozen = f if s == f else f"{f}\\|{s}"
            # No error where the run measured nothing (epoch 1's transition).
            error = f" ({signed_percent((first - second) / second)})" if second > 0 else ""
            cells.append(f"{second * scale:.{digits}f}{error}")
        if simulated is None:
            continue
        md.append(f"| {label} | {frozen} | {simulated * scale:.{digits}f} | " + " | ".join(cells) + " |")
    return md


def frozen_set(row, which):
    """A run's frozen layers in a diff row, as the tables print them: "4", or
    "4+2" with two frozen inside (a diff written before that column: the prefix)."""
    inside = row.get(f"frozen_inside_{which}", "-") or "-"
    prefix = row[f"frozen_{which}"]
    return prefix if inside == "-" else f"{prefix}+{len(inside.split())}"


def report(a, runs, validate_text):
    md = [f"Config {a.config}{' ' + ' '.join(a.sets) if a.sets else ''}; simulated mode {a.mode}; "
          f"runs in this order: {', '.join(r['name'] for r in runs)}. Errors are (simulated − measured) / measured.\n"]
    md += table(runs, "Per epoch, its transition included (s)", "_s", 1, 3) + [""]
    md += table(runs, "Per iteration, the epoch without its transition (ms)", "_iteration_s", 1e3, 2) + [""]
    md += table(runs, "Transition, before the epoch's first iteration (s)", "_transition_s", 1, 3) + [""]
    tolerance = a.tolerance / 100
    for r in runs:
        epochs = [x for x in r["rows"] if x["row"].isdigit()]
        worst = max(epochs, key=lambda x: abs(number(x["error"]) or 0))
        err = number(worst["error"]) or 0
        verdict = "within" if abs(err) <= tolerance else "NOT within"
        line = (f"- {r['name']}: {verdict} ±{a.tolerance:g}% in every epoch (largest: epoch {worst['row']}, "
                f"{signed_percent(err)})")
        if any(frozen_set(x, "first") != frozen_set(x, "second") for x in epochs):
            line += "; froze other layers than the simulation (replay its grad_norms.csv to compare like with like)"
        if any((x["K_first"], x["replicas_first"]) != (x["K_second"], x["replicas_second"]) for x in epochs):
            line += "; ran other layouts than the simulation"
        elif any(x["M_first"] != x["M_second"] for x in epochs):
            line += "; chose another M than the simulation in some epoch"
        if r["chunk_search_s"] is not None:
            line += (f"; its chunk search ({r['chunk_search_s']:.2f} s) ran in its start and did the process's "
                     "one-off work there")
        md.append(line)
    if validate_text is not None:
        md += ["", "### validate with the same profile\n", "```", validate_text.strip(), "```"]
    return "\n".join(md) + "\n"


def default_binary():
    if os.environ.get("EP_BIN"):
        return os.environ["EP_BIN"]
    if os.environ.get("EP_BUILD"):
        return os.path.join(os.environ["EP_BUILD"], "elasticpipe")
    return str(ROOT / "build" / "elasticpipe")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default="/tmp/sim-vs-measured")
    ap.add_argument("--bin", default=default_binary())
    ap.add_argument("--config", default=str(ROOT / "configs" / "gpu" / "vit_b16_h100.toml"))
    ap.add_argument("--rounds", type=int, default=1, help="each round trains first, traced, configured")
    ap.add_argument("--mode", default="configured", help="the simulated mode compared (simulate --mode; configured: as train runs the config)")
    ap.add_argument("--tolerance", type=float, default=5.0, help="per-epoch error said to be within, in percent")
    ap.add_argument("--traced-iterations", type=int, default=1000000,
                    help="exec.trace_iterations of the traced runs (default: every iteration)")
    ap.add_argument("--validate", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--validate-iterations", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="a tiny model on the CPU: checks the bench itself in seconds")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="a config override for every command")
    a = ap.parse_args()
    if a.rounds < 1 or a.traced_iterations < 1 or a.validate_iterations < 1 or a.tolerance <= 0:
        fail("--rounds, --traced-iterations, --validate-iterations: expected >= 1; --tolerance: expected > 0")
    if a.smoke:
        a.sets = SMOKE_SETS + a.sets
    try:
        cfg = load_config(a.config, a.sets)
    except ValueError as e:
        fail(str(e))
    # Each run's trace must hold iterations for `trace diff` to align (a
    # value that is no integer, elasticpipe refuses itself).
    traced = cfg.get("exec", {}).get("trace_iterations", 2)
    if isinstance(traced, int) and traced < 1:
        fail(f"{a.config}: exec.trace_iterations is 0: the runs would trace nothing to compare (--set "
             "exec.trace_iterations=1)")
    check_binary(a.bin)
    t0 = time.perf_counter()
    b = Bench(a)
    try:
        profile = b.simulate()
        runs = b.rounds()
        validate_text = b.validate(profile) if a.validate else None
    finally:
        b.close()
    with open(b.out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["run", "kind"] + list(runs[0]["rows"][0]))
        w.writeheader()
        for r in runs:
            w.writerows({"run": r["name"], "kind": r["kind"], **row} for row in r["rows"])
    md = report(a, runs, validate_text)
    (b.out / "table.md").write_text(md)
    print(md)
    print(f"wall time {time.perf_counter() - t0:.0f} s; wrote {b.out}/{{profile.json,sim/,runs/,logs/,summary.csv,"
          "table.md}")


if __name__ == "__main__":
    run_main(main)
