#!/usr/bin/env python3
"""ElasticPipe against plain PyTorch on one GPU, runs alternated (the
helper bench/gpu_vs_pytorch.sh runs; see there for the command line).

Per round, in this order: ElasticPipe without freezing
(planner.freeze_policy = "none"; K = 1 on one GPU), the PyTorch peer
without freezing,
ElasticPipe with freezing (the config as given), the peer at every frozen
layer count that run met (and 0, its reference), then the peer freezing as
it goes (`--epochs`: one epoch per ElasticPipe epoch, timed whole as
ElasticPipe's are, first steps after each freeze included). After the rounds, one
peer run with torch.compile (no freezing). ElasticPipe's samples/s are its
epochs.csv rows (an epoch's training samples over its wall time: evaluation
and checkpoints excluded, the epoch's first iterations included); the
peer's are medians of timed repeats after warm-up iterations. Writes
OUT/runs.csv (every measurement), OUT/summary.csv and OUT/table.md (the
tables printed), OUT/logs/ (every run's output) and OUT/runs/ (each
ElasticPipe run's epochs.csv and transitions.json).
"""
import argparse
import csv
import json
import re
import statistics
import sys
import time

from bench_runs import ROOT, SMOKE_SETS, Runner, check_binary, fail, run_main, with_sets
from config_set import load_config


def median(values):
    return statistics.median(values) if values else float("nan")


class Bench(Runner):
    def __init__(self, a):
        super().__init__(a.out)
        self.a = a
        self.rows = []  # runs.csv

    def ep(self, name, sets):
        keep = self.train(name, self.a.bin, self.a.config,
                          [f'exec.chunk_memo="{self.out / "chunk_memo.json"}"'] + self.a.sets + sets,
                          ("epochs.csv", "transitions.json", "plan.json"))
        with open(keep / "epochs.csv") as f:
            epochs = list(csv.DictReader(f))
        if not epochs:
            fail(f"{keep / 'epochs.csv'}: no epochs")
        # A transition's warm-up: its first iteration minus the median of the
        # next 5, inside the epoch it precedes.
        transitions = json.loads((keep / "transitions.json").read_text()) if (keep / "transitions.json").exists() else []
        warmup = {int(t["epoch"]): float(t["warmup_s"]) for t in transitions}
        late = {int(t["epoch"]): not t.get("first_batch_prefetched", True) for t in transitions}
        for e in epochs:
            e["warmup_s"] = warmup.get(int(e["epoch"]))
            e["batch_late"] = late.get(int(e["epoch"]), False)
        return epochs

    def peer_cmd(self, frozen, *options):
        cmd = [self.a.python, str(ROOT / "bench" / "pytorch_peer.py"), self.a.config, "--device", self.a.device,
               "--frozen", ",".join(map(str, frozen)), "--warmup", str(self.a.warmup), *options]
        if self.a.bf16:
            cmd.append("--bf16")
        return with_sets(cmd, self.a.sets)

    def peer(self, name, frozen, compile_=False, timeout=None):
        cmd = self.peer_cmd(frozen, "--iterations", str(self.a.iterations), "--repeats", str(self.a.repeats),
                            *(["--compile"] if compile_ else []))
        text, wall = self.run(name, cmd, timeout=timeout, must_pass=not compile_)
        if text is None:
            return None, wall
        rates = {int(n): float(v) for n, v in re.findall(r"^frozen (\d+): median ([0-9.]+) samples/s", text, re.M)}
        missing = [n for n in frozen if n not in rates]
        if missing:
            fail(f"{name}: no median for frozen {missing} in its output ({self.out / 'logs' / (name + '.log')})")
        return rates, wall

    def peer_epochs(self, name, frozen):
        """The peer freezing as it goes: one epoch per count of `frozen` (ElasticPipe's per epoch), in order."""
        text, _ = self.run(name, self.peer_cmd(frozen, "--epochs", "--iterations", str(self.a.epoch_iterations)))
        rates = [float(v) for v in re.findall(r"^epoch \d+ frozen \d+: ([0-9.]+) samples/s", text, re.M)]
        if len(rates) != len(frozen):
            fail(f"{name}: {len(rates)} epochs in its output for {len(frozen)} asked ({self.out / 'logs' / (name + '.log')})")
        return rates

    def record(self, rnd, system, run, epoch, frozen, sps, K="", M="", note=""):
        self.rows.append({"round": rnd, "system": system, "run": run, "epoch": epoch, "frozen_layers": frozen,
                          "K": K, "M": M, "samples_per_s": f"{sps:.2f}", "note": note})

    def rounds(self):
        a = self.a
        ep_nf, ep_fr, peer0, peerL, peerE = [], [], [], [], []
        seen = []
        for r in range(1, a.rounds + 1):
            print(f"round {r} of {a.rounds}", file=sys.stderr, flush=True)
            rows = self.ep(f"ep_nofreeze_r{r}", ['planner.freeze_policy="none"', f"training.epochs={a.nofreeze_epochs}"])
            if any(int(e["frozen_layers"]) for e in rows):
                fail(f"ep_nofreeze_r{r}: frozen layers with freeze_policy none ({self.out / 'runs'})")
            ep_nf.append(rows)
            for e in rows:
                self.record(r, "elasticpipe", "nofreeze", e["epoch"], e["frozen_layers"], float(e["samples_per_s"]),
                            e["K"], e["M"], "first epoch: warm-up" if e["epoch"] == "0" else "")
            rates, _ = self.peer(f"peer_nofreeze_r{r}", [0])
            peer0.append(rates[0])
            self.record(r, "pytorch_eager", "nofreeze", "", 0, rates[0])
            rows = self.ep(f"ep_freeze_r{r}", [])
            ep_fr.append(rows)
            for e in rows:
                self.record(r, "elasticpipe", "freeze", e["epoch"], e["frozen_layers"], float(e["samples_per_s"]),
                            e["K"], e["M"], "first epoch: warm-up" if e["epoch"] == "0" else "")
            for e in rows:
                if int(e["frozen_layers"]) not in seen:
                    seen.append(int(e["frozen_layers"]))
            counts = [0] + [n for n in seen if n != 0]
            rates, _ = self.peer(f"peer_frozen_r{r}", counts)
            peerL.append(rates)
            for n, v in rates.items():
                self.record(r, "pytorch_eager", "frozen", "", n, v)
            per_epoch = [int(e["frozen_layers"]) for e in rows]
            epochs = self.peer_epochs(f"peer_epochs_r{r}", per_epoch)
            peerE.append(epochs)
            for i, (n, v) in enumerate(zip(per_epoch, epochs)):
                self.record(r, "pytorch_eager", "epochs", i, n, v)
        compiled = None
        if a.compile:
            print("torch.compile run", file=sys.stderr, flush=True)
            rates, wall = self.peer("peer_compile", [0], compile_=True, timeout=a.compile_timeout)
            compiled = (rates[0] if rates else None, wall)
            if rates:
                self.record("", "pytorch_compile", "nofreeze", "", 0, rates[0])
        return ep_nf, ep_fr, peer0, peerL, peerE, compiled


def fmt(v, digits=1):
    return "n/a" if v is None or v != v else f"{v:.{digits}f}"


def report(a, ep_nf, ep_fr, peer0, peerL, peerE, compiled):
    """The tables (markdown) and the summary rows."""
    summary, md = [], []
    first = [float(rows[0]["samples_per_s"]) for rows in ep_nf]
    steady_runs = [median([float(e["samples_per_s"]) for e in rows[1:]]) for rows in ep_nf]
    ep_steady, ep_first, p0 = median(steady_runs), median(first), median(peer0)
    skew = 1 - ep_first / ep_steady if ep_steady > 0 else float("nan")
    R = len(ep_nf)
    md.append(f"### No freezing, K = {ep_nf[0][-1]['K']}: {a.model_text}; {R} round{'s' if R > 1 else ''} alternated, medians\n")
    md.append("| run | samples/s | runs | vs PyTorch eager |")
    md.append("| --- | ---: | ---: | ---: |")
    later = f"epochs 2-{a.nofreeze_epochs}" if a.nofreeze_epochs > 2 else "epoch 2"
    lines = [("ElasticPipe train, freeze_policy none, " + later, ep_steady, R),
             ("PyTorch eager (bench/pytorch_peer.py)", p0, R)]
    if compiled is not None:
        lines.append(("PyTorch torch.compile (one run, after the rounds)", compiled[0], 1 if compiled[0] else 0))
    for name, v, n in lines:
        ratio = v / p0 if v and p0 else None
        md.append(f"| {name} | {fmt(v)} | {n} | {fmt(ratio, 2)}{'x' if ratio else ''} |")
        summary.append({"table": "nofreeze", "row": name, "frozen_layers": 0, "samples_per_s": fmt(v, 2),
                        "gain": "", "vs_pytorch_eager": fmt(ratio, 3)})
    md.append("")
    md.append(f"ElasticPipe's first epoch: {fmt(ep_first)} samples/s, {fmt(100 * abs(skew))}% "
              f"{'below' if skew >= 0 else 'above'} its later epochs "
              "(it includes the process's first iterations: on CUDA the context, the cuBLAS and cuDNN handles "
              "and the caching allocator's growth); "
              + ("so the tables use the later epochs." if abs(skew) > 0.03 else
                 "within 3% of them, yet the tables still use the later epochs."))
    if compiled is not None and compiled[0] is None:
        md.append(f"torch.compile: failed or timed out after {compiled[1]:.0f} s (log: logs/peer_compile.log).")
    elif compiled is not None:
        md.append(f"torch.compile run: {compiled[1]:.0f} s of wall time, compilation included.")
    md.append("")

    # Freezing: per epoch of the freeze runs (every run meets the same frozen counts with freeze_policy alpha).
    md.append(f"### Freezing (the config as given: {a.freeze_text}); per epoch, medians over {R} round{'s' if R > 1 else ''}\n")
    md.append("ElasticPipe's gain: an epoch's samples/s over its run without freezing (above, later epochs). "
              "PyTorch steady: `--frozen L` over `--frozen 0`, measured in the same process after warm-up steps. "
              "PyTorch as epochs: `--epochs`, one epoch per ElasticPipe epoch's frozen count in one process, "
              "each timed whole with its first steps as ElasticPipe's are, over its first epoch.\n")
    md.append("| epoch | frozen layers | K | M | ElasticPipe samples/s | gain | transition warm-up (ms) "
              "| PyTorch steady samples/s | gain | ElasticPipe / PyTorch steady "
              "| PyTorch as epochs samples/s | gain | ElasticPipe / PyTorch as epochs |")
    md.append("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    peer_ref = median([r[0] for r in peerL])
    epochs_ref = median([r[0] for r in peerE])
    for i, e in enumerate(ep_fr[0]):
        L = int(e["frozen_layers"])
        same = [rows[i] for rows in ep_fr if i < len(rows) and int(rows[i]["frozen_layers"]) == L]
        ep_v = median([float(x["samples_per_s"]) for x in same])
        warm = [x["warmup_s"] * 1e3 for x in same if x["warmup_s"] is not None]
        warm_text = fmt(median(warm), 0) if warm else "-"
        if any(x["batch_late"] for x in same):
            warm_text += f" (batch late in {sum(x['batch_late'] for x in same)}/{len(same)})"
        pv = median([r[L] for r in peerL if L in r])
        ev = median([r[i] for r in peerE if i < len(r)])
        ep_gain, p_gain = ep_v / ep_steady if ep_steady else None, pv / peer_ref if peer_ref else None
        e_gain = ev / epochs_ref if epochs_ref else None
        note = " (warm-up)" if i == 0 else ""
        md.append(f"| {i + 1}{note} | {L} | {e['K']} | {e['M']} | {fmt(ep_v)} | {fmt(ep_gain, 2)}x | {warm_text} | {fmt(pv)} | "
                  f"{fmt(p_gain, 2)}x | {fmt(ep_v / pv if pv else None, 2)} | {fmt(ev)} | {fmt(e_gain, 2)}x | "
                  f"{fmt(ep_v / ev if ev else None, 2)} |")
        summary.append({"table": "freeze", "row": f"epoch {i + 1}{note}", "frozen_layers": L, "samples_per_s": fmt(ep_v, 2),
                        "gain": fmt(ep_gain, 3), "vs_pytorch_eager": fmt(ep_v / pv if pv else None, 3)})
        summary.append({"table": "freeze_pytorch", "row": f"--frozen {L}", "frozen_layers": L, "samples_per_s": fmt(pv, 2),
                        "gain": fmt(p_gain, 3), "vs_pytorch_eager": ""})
        summary.append({"table": "freeze_pytorch_epochs", "row": f"--epochs, epoch {i + 1}", "frozen_layers": L,
                        "samples_per_s": fmt(ev, 2), "gain": fmt(e_gain, 3),
                        "vs_pytorch_eager": fmt(ep_v / ev if ev else None, 3)})
    md.append("")
    md.append("Epochs are counted from 1, as train prints them; epoch 1 of the freeze runs includes the "
              "process's warm-up, which is why the gains divide by the later epochs of the runs without freezing. "
              "Transition warm-up: the first iteration after a freeze step minus the median of the next 5 "
              "(transitions.json), part of that epoch's time; \"batch late\": that iteration's batch was "
              "assembled after the freeze step, the device waiting (first_batch_prefetched false).")
    return "\n".join(md) + "\n", summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--config", default=str(ROOT / "configs" / "gpu" / "vit_b16_h100.toml"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nofreeze-epochs", type=int, default=3)
    ap.add_argument("--iterations", type=int, help="peer: timed iterations per repeat (10; --smoke: 3)")
    ap.add_argument("--warmup", type=int, help="peer: warm-up iterations before the first repeat (5; --smoke: 1)")
    ap.add_argument("--repeats", type=int, help="peer: timed repeats, the median kept (3; --smoke: 2)")
    ap.add_argument("--epoch-iterations", type=int,
                    help="peer --epochs: steps per epoch (default: the config's, its training samples over the batch)")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                    help="one peer run with torch.compile (default: on, off with --smoke)")
    ap.add_argument("--compile-timeout", type=float, default=150)
    ap.add_argument("--smoke", action="store_true", help="a tiny model on the CPU: checks the bench itself in seconds")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="a config override for both")
    a = ap.parse_args()
    if a.rounds < 1 or a.nofreeze_epochs < 2:
        fail("--rounds: expected >= 1; --nofreeze-epochs: expected >= 2 (the first epoch includes the warm-up)")
    if a.smoke:
        a.sets = SMOKE_SETS + a.sets
    for key, full, smoke in (("iterations", 10, 3), ("warmup", 5, 1), ("repeats", 3, 2)):
        if getattr(a, key) is None:
            setattr(a, key, smoke if a.smoke else full)
    if a.compile is None:
        a.compile = not a.smoke
    try:
        cfg = load_config(a.config, a.sets)  # the keys this bench reads
    except ValueError as e:
        fail(str(e))
    a.device = cfg.get("exec", {}).get("device", "cpu")
    a.bf16 = cfg.get("training", {}).get("precision", "fp32") == "bf16"
    m, t = cfg["model"], cfg["training"]
    if a.epoch_iterations is None:
        samples = int(cfg.get("data", {}).get("num_train_samples", 0))
        if samples <= 0:
            fail(f"{a.config}: key 'data.num_train_samples' is needed for the peer's epochs (or --epoch-iterations)")
        a.epoch_iterations = -(-samples // int(t["batch_size"]))
    a.model_text = (f"ViT L={m['num_hidden_layers']} H={m['hidden_size']} {m['image_size']}x{m['image_size']}/"
                    f"{m['patch_size']}, batch {t['batch_size']}, {t.get('precision', 'fp32')}, {t['optimizer']} "
                    f"lr {t['lr']}, {a.device}")
    p = cfg.get("planner", {})
    a.freeze_text = f"freeze_policy {p.get('freeze_policy', 'alpha')}, alpha {float(p.get('alpha', 1 / 3)):.3g}"
    check_binary(a.bin)
    t0 = time.perf_counter()
    b = Bench(a)
    try:
        results = b.rounds()
    finally:
        b.close()
    with open(b.out / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(b.rows[0]))
        w.writeheader()
        w.writerows(b.rows)
    md, summary = report(a, *results)
    with open(b.out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(summary[0]))
        w.writeheader()
        w.writerows(summary)
    (b.out / "table.md").write_text(md)
    print(md)
    print(f"wall time {time.perf_counter() - t0:.0f} s; wrote {b.out}/{{runs.csv,summary.csv,table.md,logs/,runs/}}")


if __name__ == "__main__":
    run_main(main)
