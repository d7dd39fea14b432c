#!/usr/bin/env python3
"""The PyTorch peer: the executor's ViT (exec/model.cpp: fused QKV, pre-LN
with eps 1e-12, GELU MLP, CLS head) written in torch.nn and trained with a
plain eager loop (optionally torch.compile) on synthetic images, at the
config's batch, optimizer and lr. It runs on the torch that scripts/setup.sh
installs, so the peer is today's PyTorch:

    build/torch-venv/bin/python bench/pytorch_peer.py CONFIG [--device cpu|cuda]
        [--iterations 30] [--warmup 5] [--repeats 5] [--frozen L] [--bf16]
        [--attention sdpa|matmul] [--compile] [--threads N]

--frozen L runs the stem and the first L layers without autograd and
without their parameters in the optimizer (what freezing them does, without
a cache). Prints samples/s per repeat and their median.
"""
import argparse
import math
import statistics
import sys
import time
import tomllib
import warnings

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--frozen", type=int, default=0)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--attention", choices=["sdpa", "matmul"], default="sdpa")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    a = ap.parse_args()
    try:
        with open(a.config, "rb") as f:
            cfg = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        fail(f"{a.config}: {e}")
    m, t = cfg.get("model", {}), cfg.get("training", {})
    if m.get("family") != "vit":
        fail(f"{a.config}: key 'model.family': expected \"vit\" (the peer is the ViT), found {m.get('family')!r}")
    if not 0 <= a.frozen <= m["num_hidden_layers"]:
        fail(f"--frozen: expected 0..{m['num_hidden_layers']}, found {a.frozen}")
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        fail("--device cuda: no CUDA device is visible")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    torch.manual_seed(0)
    layers = vit(m, a.attention == "sdpa")
    cut = 1 + 2 * a.frozen  # the stem and the frozen layers' sublayers
    frozen, active = nn.Sequential(*layers[:cut]).to(dev), nn.Sequential(*layers[cut:]).to(dev)
    frozen.requires_grad_(False)
    params = list(active.parameters())
    lr = float(t.get("lr", 1e-3))
    opt = torch.optim.AdamW(params, lr=lr) if t.get("optimizer", "adamw") == "adamw" else torch.optim.SGD(params, lr=lr)
    B = int(t.get("batch_size", 64))
    x = torch.randn(B, m["num_channels"], m["image_size"], m["image_size"])
    y = torch.randint(0, m["num_labels"], (B,))
    if dev.type == "cuda":
        x, y = x.pin_memory(), y.pin_memory()

    def step(x, y):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.bf16):
            with torch.no_grad():
                h = frozen(x)
            loss = F.cross_entropy(active(h), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    run = torch.compile(step) if a.compile else step
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    print(f"PyTorch {torch.__version__} eager{' + compile' if a.compile else ''}, {a.device}, "
          f"{'bf16 autocast' if a.bf16 else 'fp32'}, attention {a.attention}, batch {B}, frozen layers {a.frozen}, "
          f"{torch.get_num_threads()} intra-op threads")
    rates = []
    for r in range(a.repeats):
        for _ in range(a.warmup if r == 0 else 1):
            run(x.to(dev, non_blocking=True), y.to(dev, non_blocking=True))
        sync()
        t0 = time.perf_counter()
        for _ in range(a.iterations):
            run(x.to(dev, non_blocking=True), y.to(dev, non_blocking=True))
        sync()
        rates.append(a.iterations * B / (time.perf_counter() - t0))
        print(f"repeat {r + 1}: {rates[-1]:.1f} samples/s")
    print(f"median {statistics.median(rates):.1f} samples/s")


if __name__ == "__main__":
    main()
