#!/usr/bin/env python3
"""The PyTorch peer: the executor's ViT (exec/model.cpp: fused QKV, pre-LN
with eps 1e-12, GELU MLP, CLS head) written in torch.nn and trained with a
plain eager loop (optionally torch.compile) on synthetic images, at the
config's batch, optimizer, lr and weight decay. It runs on the torch that
scripts/setup.sh installs, so the peer is today's PyTorch:

    build/torch-venv/bin/python bench/pytorch_peer.py CONFIG [--set section.key=value ...]
        [--device cpu|cuda] [--iterations 30] [--warmup 5] [--repeats 5] [--frozen L[,L...]]
        [--epochs] [--breakdown] [--bf16] [--attention sdpa|matmul] [--compile] [--threads N]

The batch lives in host memory (pinned on CUDA) and is copied to the device
with non_blocking at every step, as a training loop with a pinned DataLoader
does; the loop never waits on the device between steps.

--frozen L runs the stem and the first L layers without autograd and
without their parameters in the optimizer (what freezing them does in the
executor, without a cache: its frozen prefix is the stem and layers
0..L-1; at L = 0 nothing is frozen, the stem included). A list (--frozen
0,4,6) measures each count in turn in one process, on the same weights.
--epochs instead trains one epoch of --iterations steps at each count of
the list in turn, as a training that freezes as it goes (one optimizer
throughout, whose state the still-trained parameters keep), timing each
epoch whole with its first steps, as ElasticPipe's epochs.csv does; only
the first count has --warmup steps before it. Prints `epoch E frozen L: X
samples/s` per epoch.
--breakdown adds, per count, the median forward, backward and optimizer
step of --iterations more steps, each step waited for and its parts timed
by CUDA events (on the CPU by the host clock): what ElasticPipe's traced
iterations record as its forward, backward and optimizer actions.
--compile compiles the frozen prefix and the trained part with
torch.compile (forward and backward; the optimizer stays eager), once per
frozen count. --set overrides a config key as `elasticpipe --set` does (the
value read as TOML, a bare word as a string). Prints samples/s per repeat
and, per frozen count, `frozen L: median X samples/s`; with one count also
`median X samples/s`.
"""
import argparse
import math
import statistics
import sys
import time
import warnings

from config_set import load_config

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # the peer needs no NumPy
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402


def fail(msg):
    print("ERROR: " + msg, file=sys.stderr)
    sys.exit(2)


class Attention(nn.Module):
    def __init__(self, H, heads, sdpa):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.qkv, self.out = nn.Linear(H, 3 * H), nn.Linear(H, H)
        self.ln = nn.LayerNorm(H, eps=1e-12)

    def forward(self, x):
        B, S, H = x.shape
        d = H // self.heads
        q, k, v = self.qkv(self.ln(x)).view(B, S, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            ctx = F.scaled_dot_product_attention(q, k, v)
        else:
            ctx = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), -1) @ v
        return x + self.out(ctx.transpose(1, 2).reshape(B, S, H))


class Mlp(nn.Module):
    def __init__(self, H, I):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(H, I), nn.Linear(I, H)
        self.ln = nn.LayerNorm(H, eps=1e-12)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class Stem(nn.Module):
    def __init__(self, m):
        super().__init__()
        H, p = m["hidden_size"], m["patch_size"]
        self.patch = nn.Conv2d(m["num_channels"], H, p, stride=p)
        tokens = (m["image_size"] // p) ** 2 + 1
        self.cls_token = nn.Parameter(torch.randn(1, 1, H) * 0.02)
        self.position = nn.Parameter(torch.randn(1, tokens, H) * 0.02)

    def forward(self, x):
        patches = self.patch(x).flatten(2).transpose(1, 2)
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), patches], 1) + self.position


class Head(nn.Module):
    def __init__(self, H, classes):
        super().__init__()
        self.ln, self.classifier = nn.LayerNorm(H, eps=1e-12), nn.Linear(H, classes)

    def forward(self, x):
        return self.classifier(self.ln(x[:, 0]))


def vit(m, sdpa):
    layers = [Stem(m)]
    for _ in range(m["num_hidden_layers"]):
        layers += [Attention(m["hidden_size"], m["num_attention_heads"], sdpa),
                   Mlp(m["hidden_size"], m["intermediate_size"])]
    layers.append(Head(m["hidden_size"], m["num_labels"]))
    for mod in layers:
        for name, p in mod.named_parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
    return layers


def frozen_counts(text, L):
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        fail(f"--frozen: expected a layer count or a comma-separated list, found {text!r}")
    for n in counts:
        if not 0 <= n <= L:
            fail(f"--frozen: expected 0..{L}, found {n}")
    return counts


def optimizer(t, params):
    lr, wd, kind = float(t.get("lr", 1e-3)), float(t.get("weight_decay", 0.0)), t.get("optimizer", "adamw")
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    return torch.optim.SGD(params, lr=lr, momentum=float(t.get("momentum", 0.9)), weight_decay=wd)


def split_at(layers, n_frozen):
    """The frozen prefix (the stem and the first n_frozen layers; nothing at 0) and the trained rest."""
    cut = 1 + 2 * n_frozen if n_frozen > 0 else 0  # the stem freezes with the first layer, as in the executor
    frozen, active = nn.Sequential(*layers[:cut]), nn.Sequential(*layers[cut:])
    frozen.requires_grad_(False)
    active.requires_grad_(True)
    return frozen, active


def make_step(a, frozen, active, opt, dev, mark=lambda: None):
    """One training step; `mark()` runs between its forward, backward and optimizer step."""
    run_frozen = torch.compile(frozen) if a.compile and len(frozen) else frozen
    run_active = torch.compile(active) if a.compile else active

    def step(x, y):
        mark()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.bf16):
            with torch.no_grad():
                h = run_frozen(x)
            loss = F.cross_entropy(run_active(h), y)
        mark()
        loss.backward()
        mark()
        opt.step()
        opt.zero_grad(set_to_none=True)
        mark()

    return step


def breakdown(a, frozen, active, opt, dev, x, y, sync):
    """Median ms of the forward, backward and optimizer step over --iterations steps, each timed on
    the device (CUDA events on the stream; on the CPU the host clock), to set beside ElasticPipe's
    traced actions (exec.trace_iterations)."""
    marks = []
    if dev.type == "cuda":
        def mark():
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            marks.append(e)

        def elapsed(a_, b_):
            return a_.elapsed_time(b_)
    else:
        def mark():
            marks.append(time.perf_counter())

        def elapsed(a_, b_):
            return (b_ - a_) * 1e3
    step = make_step(a, frozen, active, opt, dev, mark)
    parts = [[], [], []]
    for _ in range(a.iterations):
        marks.clear()
        step(x.to(dev, non_blocking=True), y.to(dev, non_blocking=True))
        sync()
        for i in range(3):
            parts[i].append(elapsed(marks[i], marks[i + 1]))
    return [statistics.median(p) for p in parts]


def run_steps(step, x, y, dev, sync, n):
    """Samples/s of n steps, the device waited for at the end."""
    t0 = time.perf_counter()
    for _ in range(n):
        step(x.to(dev, non_blocking=True), y.to(dev, non_blocking=True))
    sync()
    return n * x.shape[0] / (time.perf_counter() - t0)


def measure(a, layers, n_frozen, t, x, y, dev, sync):
    """Samples/s per repeat with the stem and the first n_frozen layers frozen."""
    frozen, active = split_at(layers, n_frozen)
    opt = optimizer(t, list(active.parameters()))
    step = make_step(a, frozen, active, opt, dev)
    rates = []
    for r in range(a.repeats):
        warm = a.warmup if r == 0 else 1
        t0 = time.perf_counter()
        if warm:
            run_steps(step, x, y, dev, sync, warm)
        if r == 0:
            print(f"frozen {n_frozen}: warm-up, {warm} iterations in {time.perf_counter() - t0:.2f} s"
                  f"{' (compilation included)' if a.compile else ''}")
        rates.append(run_steps(step, x, y, dev, sync, a.iterations))
        print(f"repeat {r + 1}: {rates[-1]:.1f} samples/s")
    if a.breakdown:
        f, b, o = breakdown(a, frozen, active, opt, dev, x, y, sync)
        print(f"frozen {n_frozen}: breakdown forward {f:.2f} ms, backward {b:.2f} ms, optimizer {o:.2f} ms "
              f"(median of {a.iterations} steps, each waited for)")
    del opt
    return statistics.median(rates)


def measure_epochs(a, layers, counts, t, x, y, dev, sync):
    """One epoch of --iterations steps per frozen count, in order, as a training that freezes as it goes
    runs them in one process: one optimizer throughout (a frozen parameter gets no gradient, so the
    optimizer skips it and keeps the others' state), each epoch timed whole, its first steps included."""
    opt = optimizer(t, [p for mod in layers for p in mod.parameters()])
    rates = []
    for i, n in enumerate(counts):
        step = make_step(a, *split_at(layers, n), opt, dev)
        if i == 0 and a.warmup:
            run_steps(step, x, y, dev, sync, a.warmup)
        rates.append(run_steps(step, x, y, dev, sync, a.iterations))
        print(f"epoch {i + 1} frozen {n}: {rates[-1]:.1f} samples/s")
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--frozen", default="0", help="frozen layers, or a comma-separated list of counts")
    ap.add_argument("--epochs", action="store_true",
                    help="one epoch of --iterations steps per --frozen count, in order, each timed whole")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--breakdown", action="store_true",
                    help="after the repeats, time forward, backward and optimizer step apart (device events)")
    ap.add_argument("--attention", choices=["sdpa", "matmul"], default="sdpa")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    a = ap.parse_args()
    if a.iterations < 1 or a.repeats < 1 or a.warmup < 0:
        fail("--iterations and --repeats: expected >= 1, --warmup >= 0")
    try:
        cfg = load_config(a.config, a.set)
    except ValueError as e:
        fail(str(e))
    m, t = cfg.get("model", {}), cfg.get("training", {})
    if m.get("family") != "vit":
        fail(f"{a.config}: key 'model.family': expected \"vit\" (the peer is the ViT), found {m.get('family')!r}")
    m.setdefault("num_channels", 3)
    counts = frozen_counts(a.frozen, m["num_hidden_layers"])
    if a.epochs and (a.compile or any(c < b for b, c in zip(counts, counts[1:]))):
        fail(f"--epochs: expected frozen counts that never go down and no --compile, found --frozen {a.frozen}"
             f"{' --compile' if a.compile else ''}")
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        fail("--device cuda: no CUDA device is visible")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if a.compile:  # each frozen count compiles its own two modules: room for all of them
        for knob in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob)))
    dev = torch.device(a.device)
    torch.manual_seed(0)
    layers = [mod.to(dev) for mod in vit(m, a.attention == "sdpa")]
    B = int(t.get("batch_size", 64))
    # The batch in host memory, pinned on CUDA so that the copy each step is
    # asynchronous, as a DataLoader with pin_memory=True hands it over.
    x = torch.randn(B, m["num_channels"], m["image_size"], m["image_size"])
    y = torch.randint(0, m["num_labels"], (B,))
    if dev.type == "cuda":
        x, y = x.pin_memory(), y.pin_memory()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    print(f"PyTorch {torch.__version__} eager{' + compile' if a.compile else ''}, {a.device}, "
          f"{'bf16 autocast' if a.bf16 else 'fp32'}, attention {a.attention}, batch {B}, "
          f"optimizer {t.get('optimizer', 'adamw')}, frozen layers {a.frozen}, "
          f"{torch.get_num_threads()} intra-op threads, batch from {'pinned ' if dev.type == 'cuda' else ''}host memory")
    if a.epochs:
        measure_epochs(a, layers, counts, t, x, y, dev, sync)
        return
    medians = []
    for n in counts:
        medians.append(measure(a, layers, n, t, x, y, dev, sync))
        print(f"frozen {n}: median {medians[-1]:.1f} samples/s")
    if len(counts) == 1:
        print(f"median {medians[0]:.1f} samples/s")


if __name__ == "__main__":
    main()
