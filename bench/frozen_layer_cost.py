"""What a frozen layer costs where it sits: the measurements behind the
per-layer freezing design record
(docs/decisions/0037-freezing-beyond-the-prefix.md).

For one Transformer encoder layer (pre-norm, GELU MLP of 4H, no dropout)
it times, alternating the variants round by round on one thread:
  forward          the forward of a trainable layer (autograd recording)
  backward, full   its backward: the input's gradient and the weights'
  backward, input  the backward of a frozen layer after a trainable one:
                   the input's gradient only (weights' requires_grad off)
  forward, no grad the forward of a frozen prefix layer (nothing recorded)
and prints the medians and the ratios the cost model needs.

  python3 bench/frozen_layer_cost.py [--rounds 15] [--threads 1]
(the Python of scripts/setup.sh's build/torch-venv has torch)
"""
import argparse
import statistics
import time

import torch


def layer(hidden, heads):
    return torch.nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0, activation="gelu",
                                            batch_first=True, norm_first=True)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(hidden, heads, tokens, batch, rounds):
    torch.manual_seed(0)
    trainable, frozen = layer(hidden, heads), layer(hidden, heads)
    frozen.load_state_dict(trainable.state_dict())
    for p in frozen.parameters():
        p.requires_grad_(False)
    x0 = torch.randn(batch, tokens, hidden)
    grad = torch.randn(batch, tokens, hidden)

    def forward():
        x = x0.clone().requires_grad_(True)
        return trainable(x)

    def backward(model):
        x = x0.clone().requires_grad_(True)
        y = model(x)
        return lambda: y.backward(grad)

    def no_grad():
        with torch.no_grad():
            frozen(x0)

    times = {k: [] for k in ("forward", "backward, full", "backward, input", "forward, no grad")}
    for r in range(rounds + 1):  # the first round warms up
        order = list(times)
        if r % 2:
            order.reverse()  # alternate, so that drift falls on every variant alike
        for k in order:
            if k == "forward":
                t = timed(forward)
            elif k == "forward, no grad":
                t = timed(no_grad)
            else:
                trainable.zero_grad(set_to_none=True)
                t = timed(backward(trainable if k == "backward, full" else frozen))
            if r:
                times[k].append(t)
    return {k: statistics.median(v) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    shapes = [("ViT-S/16 layer, batch 8", 384, 6, 197, 8), ("BERT-base layer, batch 8", 768, 12, 128, 8)]
    print(f"torch {torch.__version__}, {a.threads} thread(s), median of {a.rounds} alternating rounds")
    print("| layer | forward (ms) | backward, full (ms) | backward, input only (ms) | forward, no grad (ms) | "
          "input-only / full backward | frozen inside / trainable (F+B) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, h, heads, tokens, batch in shapes:
        m = measure(h, heads, tokens, batch, a.rounds)
        f, bf, bi, ng = (m[k] * 1e3 for k in ("forward", "backward, full", "backward, input", "forward, no grad"))
        print(f"| {name} | {f:.1f} | {bf:.1f} | {bi:.1f} | {ng:.1f} | {bi / bf:.2f} | {(f + bi) / (f + bf):.2f} |")


if __name__ == "__main__":
    main()
