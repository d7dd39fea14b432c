#!/usr/bin/env python3
"""Each collective model against the step model on the four paper configs.

Runs `elasticpipe simulate CONFIG --mode all` once per model and prints, per
config and model, the largest relative error of a mode's speedup and of any
mode's epoch time against sim.collectives = "steps", with the wall time of
each run: the table of docs/SIMULATOR.md ("Collective models").

    python3 bench/collective_fidelity.py [BINARY]   (default ./build/elasticpipe)
"""
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ["vit_imagenet", "vit_cifar100", "bert_base_sst2", "bert_large_squad"]
MODELS = ["steps", "phases", "analytic"]


def simulate(binary, config, model, out):
    start = time.monotonic()
    subprocess.run([binary, "simulate", str(ROOT / "configs/paper" / f"{config}.toml"), "--mode", "all",
                    "--set", f"sim.collectives={model}", "--set", "sim.trace=false", "--out", out],
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - start
    with open(Path(out) / "summary.json") as f:
        return {m["mode"]: m for m in json.load(f)["modes"]}, wall


def worst(pairs):
    return max(abs(a / b - 1) for a, b in pairs)


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build/elasticpipe")
    print("| config | model | worst speedup error | worst epoch-time error | mode of the worst epoch | wall |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for config in CONFIGS:
            runs = {m: simulate(binary, config, m, f"{tmp}/{config}.{m}") for m in MODELS}
            steps, _ = runs["steps"]
            for model in MODELS:
                modes, wall = runs[model]
                speedup = worst((modes[m]["speedup"], steps[m]["speedup"]) for m in steps)
                per_mode = {m: worst(zip(modes[m]["epoch_s"], steps[m]["epoch_s"])) for m in steps}
                mode = max(per_mode, key=per_mode.get)
                print(f"| {config} | {model} | {100 * speedup:.2f}% | {100 * per_mode[mode]:.2f}% | {mode} "
                      f"| {wall:.2f} s |", flush=True)


if __name__ == "__main__":
    main()
