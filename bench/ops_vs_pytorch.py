#!/usr/bin/env python3
"""ElasticPipe's training iteration against PyTorch's, operator by operator,
on the CPU: what a GPU would run, compared where no GPU is.

    build/torch-venv/bin/python bench/ops_vs_pytorch.py [--config FILE] [--set k=v ...]
        [--frozen L[,L...]] [--bin DIR] [--trace-lib LIB] [--check]

Both systems train the config's ViT (by default configs/gpu/vit_b16_h100.toml
shrunk to a CPU's size, bench/gpu_vs_pytorch.py's --smoke model) at K = 1,
M = 1, without the cache: `elasticpipe-exec train` and bench/pytorch_peer.py,
each with LD_PRELOAD=libep_op_trace.so (bench/op_trace.cpp, built beside
elasticpipe), which records every ATen operator and autograd node the
process runs. One iteration of each, the last of the run (from one
optimizer step to the next), is compared: the autograd nodes of its
backward (the graph the forward built) and the operators its forward calls.

--frozen L freezes the stem and the first L layers: ElasticPipe with
freeze_policy "replay" freezing them after a first epoch, the peer with
--frozen L; a list compares each count. Prints a table of what differs.

--check exits 1 when ElasticPipe's backward runs an autograd node more
often than PyTorch's, but for its loss's (a per-sample weighted sum over
the batch: the rows that pad a last batch weigh 0), or when the two
backwards leave different parameters with a gradient. Exit 2: bad
arguments; 77: the trace library and the Python's torch are not the same
LibTorch (a Debian build), so nothing can be compared.
"""
import argparse
import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_runs import SMOKE_SETS
from config_set import load_config
from pytorch_peer import frozen_counts

ROOT = Path(__file__).resolve().parent.parent
NODE = "autograd::engine::evaluate_function: "
# ElasticPipe's loss weighs each sample (exact-once sampling pads a last
# batch with rows of weight 0): a product, a sum and a division over [B]
# that PyTorch's mean cross-entropy has not.
LOSS_NODES = {"MulBackward0", "SumBackward0", "DivBackward1"}
PEER_ITERATIONS = 4  # the last one is compared


def fail(msg, code=2):
    print("ERROR: " + msg, file=sys.stderr)
    sys.exit(code)


def read_trace(path):
    """[(thread, depth, kind, name)] in the order the process ran them."""
    rows = []
    with open(path) as f:
        for line in f:
            tid, depth, kind, name = line.rstrip("\n").split("\t", 3)
            rows.append((tid, int(depth), kind, name))
    return rows


def last_iteration(rows, is_step, who):
    """The records from the last but one optimizer step to the last: the forward and backward of the
    run's last iteration (the step itself excluded)."""
    steps = [i for i, r in enumerate(rows) if r[1] == 0 and is_step(r)]
    if len(steps) < 2:
        fail(f"{who}: fewer than two optimizer steps in its operator trace ({len(steps)})", 1)
    first = steps[-2]
    while first < len(rows) and (rows[first][1] > 0 or is_step(rows[first])):
        first += 1  # past the step's own nested operators
    return rows[first:steps[-1]]


def summary(window):
    """(autograd nodes run, top-level operators called outside them) of one iteration."""
    nodes, ops = collections.Counter(), collections.Counter()
    for _, depth, kind, name in window:
        if depth != 0:
            continue
        if name.startswith(NODE):
            nodes[name[len(NODE):]] += 1
        elif kind == "op":
            ops[name] += 1
    return nodes, ops


def run_traced(cmd, trace_lib, trace, log):
    env = dict(os.environ, LD_PRELOAD=str(trace_lib), EP_OP_TRACE=str(trace))
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0 or not Path(trace).is_file():
        tail = Path(log).read_text().splitlines()[-5:]
        fail(f"{' '.join(map(str, cmd[:3]))} ... exited {rc}; its output ends:\n" + "\n".join(tail), 1)
    return read_trace(trace)


def same_libtorch(trace_lib):
    """The trace library's libtorch_cpu is the one this Python's torch loads."""
    import torch  # loaded by pytorch_peer, its NumPy warning silenced
    mine = (Path(torch.__file__).parent / "lib" / "libtorch_cpu.so").resolve()
    out = subprocess.run(["ldd", str(trace_lib)], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.strip().startswith("libtorch_cpu.so") and "=>" in line:
            return Path(line.split("=>")[1].split("(")[0].strip()).resolve() == mine, mine
    return False, mine


def compare(a, frozen, work):
    sets = SMOKE_SETS + [
        'training.optimizer="adamw"', "planner.chunk_search=false", "planner.M=1", 'planner.cache="off"',
        "exec.trace_iterations=0",
    ] + a.sets
    cfg = load_config(a.config, sets)
    bf16 = cfg.get("training", {}).get("precision") == "bf16"
    ep_sets = sets + (["training.epochs=1", 'planner.freeze_policy="none"'] if frozen == 0 else
                      ["training.epochs=2", 'planner.freeze_policy="replay"', f"planner.replay_frozen=[{frozen}]"])
    ep = run_traced([a.bin / "elasticpipe-exec", "train", a.config, "--out", work / f"ep{frozen}"] +
                    [x for s in ep_sets for x in ("--set", s)], a.trace_lib, work / f"ep{frozen}.ops",
                    work / f"ep{frozen}.log")
    peer = run_traced([sys.executable, ROOT / "bench/pytorch_peer.py", a.config, "--device", "cpu",
                       "--iterations", str(PEER_ITERATIONS), "--warmup", "1", "--repeats", "1", "--frozen", str(frozen)] +
                      (["--bf16"] if bf16 else []) + [x for s in sets for x in ("--set", s)],
                      a.trace_lib, work / f"peer{frozen}.ops", work / f"peer{frozen}.log")
    ep_nodes, ep_ops = summary(last_iteration(ep, lambda r: r[3] in ("aten::_fused_adamw_", "aten::_fused_adam_"),
                                              "ElasticPipe (torch >= 2.4 needed: its fused AdamW marks the steps)"))
    pt_nodes, pt_ops = summary(last_iteration(peer, lambda r: r[3].startswith("Optimizer.step#"), "PyTorch"))
    print(f"\n### Frozen layers {frozen}: one iteration's autograd nodes (backward) and forward operators\n")
    print("| | ElasticPipe | PyTorch |\n| --- | ---: | ---: |")
    print(f"| autograd nodes | {sum(ep_nodes.values())} | {sum(pt_nodes.values())} |")
    print(f"| operators called outside the backward | {sum(ep_ops.values())} | {sum(pt_ops.values())} |")
    print(f"| parameters given a gradient (AccumulateGrad) | {ep_nodes['torch::autograd::AccumulateGrad']} | "
          f"{pt_nodes['torch::autograd::AccumulateGrad']} |")
    problems = []
    diff = sorted(set(ep_nodes) | set(pt_nodes), key=lambda n: (-(ep_nodes[n] - pt_nodes[n]), n))
    rows = [(n, ep_nodes[n], pt_nodes[n]) for n in diff if ep_nodes[n] != pt_nodes[n]]
    rows += [(f"{n} (called)", ep_ops[n], pt_ops[n]) for n in sorted(set(ep_ops) | set(pt_ops))
             if ep_ops[n] != pt_ops[n]]
    if rows:
        print("\nWhat differs (autograd nodes, then operators called outside the backward):\n")
        print("| | ElasticPipe | PyTorch |\n| --- | ---: | ---: |")
        for n, e, p in rows:
            print(f"| {n} | {e} | {p} |")
    for n in diff:
        if n == "torch::autograd::AccumulateGrad":
            if ep_nodes[n] != pt_nodes[n]:
                problems.append(f"{ep_nodes[n]} parameters given a gradient, PyTorch {pt_nodes[n]}")
        elif ep_nodes[n] > pt_nodes[n] and not (n in LOSS_NODES and ep_nodes[n] - pt_nodes[n] <= 1):
            problems.append(f"autograd node {n}: {ep_nodes[n]} per iteration, PyTorch {pt_nodes[n]}")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs/gpu/vit_b16_h100.toml"))
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--frozen", default="0,3", help="frozen layer counts to compare (default 0,3)")
    ap.add_argument("--bin", type=Path, default=ROOT / "build", help="the build folder (elasticpipe-exec)")
    ap.add_argument("--trace-lib", type=Path, help="libep_op_trace.so (default: in --bin)")
    ap.add_argument("--check", action="store_true", help="exit 1 when ElasticPipe's backward does more")
    a = ap.parse_args()
    a.trace_lib = (a.trace_lib or a.bin / "libep_op_trace.so").resolve()
    a.bin = a.bin.resolve()
    if not (a.bin / "elasticpipe-exec").is_file():
        fail(f"--bin: expected a build folder with elasticpipe-exec, found {a.bin}")
    if not a.trace_lib.is_file():
        fail(f"--trace-lib: expected libep_op_trace.so, found no file {a.trace_lib}")
    try:
        layers = load_config(a.config, SMOKE_SETS + a.sets).get("model", {}).get("num_hidden_layers", 1)
    except ValueError as e:
        fail(str(e))
    counts = frozen_counts(a.frozen, layers - 1)  # one layer stays trained
    same, mine = same_libtorch(a.trace_lib)
    if not same:
        print(f"skipped: {a.trace_lib.name} is not linked to this Python's LibTorch ({mine}): "
              "compare on the torch 2.x build (scripts/setup.sh)")
        sys.exit(77)
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for frozen in counts:
            problems += [f"frozen {frozen}: {p}" for p in compare(a, frozen, Path(tmp))]
    if problems:
        print("\n" + "\n".join("MORE THAN PYTORCH: " + p for p in problems))
        if a.check:
            sys.exit(1)
    else:
        print("\nElasticPipe's backward runs no autograd node more often than PyTorch's (its loss's aside)")


if __name__ == "__main__":
    main()
