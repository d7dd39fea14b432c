"""The fine-tune a transformers user writes: BertForSequenceClassification
from the same checkpoint, the same texts (tokenised by the checkpoint's
tokenizer, padded to model.seq_length), the same hyper-parameters (AdamW,
lr, weight decay, batch, epochs, warm-up and linear or cosine decay as
exec::learning_rate, seed) and the checkpoint's dropout (as ElasticPipe's
trained layers apply it), in a plain PyTorch loop over all cores: shuffle, forward, cross-entropy,
backward, step; test accuracy after every epoch. A peer of
bench/finetune_minilm.py, run on scripts/setup.sh's Python.

  hf_peer.py CONFIG JSONL_DIR [--set key=value ...]

JSONL_DIR holds train.jsonl and test.jsonl ({"text", "label"}; the classes
sorted, as scripts/prepare_data.py numbers them). Prints the trainer's
lines: "epoch E/N  loss L  acc A%", then "trained N epochs in S s, final
test accuracy A%".
"""
import json
import math
import os
import sys
import time
import tomllib

import torch
from transformers import AutoTokenizer, BertForSequenceClassification


def config(path, sets):
    with open(path, "rb") as f:
        c = tomllib.load(f)
    for s in sets:
        key, value = s.split("=", 1)
        section, name = key.split(".", 1)
        c[section][name] = tomllib.loads(f"v = {value}")["v"]
    return c


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def learning_rate(t, step, total):
    warm = t.get("warmup_steps", 0)
    if warm > 0 and step < warm:
        return t["lr"] * (step + 1) / warm
    progress = min(1.0, max(0.0, (step - warm) / max(1, total - warm)))
    schedule = t.get("lr_schedule", "constant")
    if schedule == "linear":
        return t["lr"] * (1 - progress)
    if schedule == "cosine":
        return t["lr"] * 0.5 * (1 + math.cos(math.pi * progress))
    return t["lr"]


def main(argv):
    sets = [argv[i + 1] for i in range(2, len(argv) - 1, 2) if argv[i] == "--set"]
    c = config(argv[0], sets)
    m, d, t = c["model"], c["data"], c["training"]
    checkpoint = os.path.join(os.path.dirname(os.path.abspath(argv[0])), m["checkpoint"])
    train, test = rows(os.path.join(argv[1], "train.jsonl")), rows(os.path.join(argv[1], "test.jsonl"))
    train, test = train[:d["num_train_samples"]], test[:d["num_test_samples"]]
    classes = sorted({r["label"] for r in rows(os.path.join(argv[1], "train.jsonl"))})
    torch.manual_seed(t["seed"])
    torch.set_num_threads(os.cpu_count())
    tok = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)

    def encode(rs):
        enc = tok([r["text"] for r in rs], truncation=True, max_length=m["seq_length"], padding="max_length",
                  return_tensors="pt")
        return enc["input_ids"], enc["attention_mask"], torch.tensor([classes.index(r["label"]) for r in rs])

    (x, mask, y), (tx, tmask, ty) = encode(train), encode(test)
    model = BertForSequenceClassification.from_pretrained(checkpoint, num_labels=m["num_labels"])
    opt = torch.optim.AdamW(model.parameters(), lr=t["lr"], weight_decay=t.get("weight_decay", 0.0))
    batch, epochs = t["batch_size"], t["epochs"]
    steps = (len(train) + batch - 1) // batch
    g = torch.Generator().manual_seed(t["seed"])
    step, trained_s, acc = 0, 0.0, 0.0
    for epoch in range(1, epochs + 1):
        t0 = time.monotonic()
        model.train()
        order = torch.randperm(len(train), generator=g)
        loss_sum = 0.0
        for first in range(0, len(train), batch):
            idx = order[first:first + batch]
            for group in opt.param_groups:
                group["lr"] = learning_rate(t, step, steps * epochs)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(input_ids=x[idx], attention_mask=mask[idx]).logits, y[idx])
            loss.backward()
            opt.step()
            loss_sum += loss.item()
            step += 1
        trained_s += time.monotonic() - t0
        model.eval()
        correct = 0
        with torch.no_grad():
            for first in range(0, len(test), batch):
                logits = model(input_ids=tx[first:first + batch], attention_mask=tmask[first:first + batch]).logits
                correct += int((logits.argmax(-1) == ty[first:first + batch]).sum())
        acc = 100.0 * correct / len(test)
        print(f"epoch {epoch}/{epochs}  loss {loss_sum / steps:.4f}  acc {acc:.2f}%", flush=True)
    print(f"trained {epochs} epochs in {trained_s:.1f} s, final test accuracy {acc:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
