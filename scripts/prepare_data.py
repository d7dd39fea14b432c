#!/usr/bin/env python3
"""Prepares a user's data set for `elasticpipe train` (data.name = "prepared",
data.path = OUT): OUT/train.epdata and OUT/test.epdata, the format
exec/prepared_data.hpp documents and reads.

  images: a folder of class subfolders per split (the class names are the
          training folder's subfolders, sorted), resized to --image-size as
          Hugging Face's ViTImageProcessor does (Pillow, bilinear) and stored
          as bytes with the checkpoint's normalisation
          (preprocessor_config.json's image_mean / image_std; 0.5 without one).
  text:   a CSV (with a header row) or JSON-lines file per split of (text,
          label), tokenised by the checkpoint's own tokenizer (transformers'
          AutoTokenizer on --tokenizer, offline), padded or cut to
          --seq-length; the classes are --classes, else the training labels
          sorted (as numbers where all are integers).

Runs in the torch venv scripts/setup.sh makes (scripts/hf-requirements.txt):
  build/torch-venv/bin/python scripts/prepare_data.py text --train train.csv \\
      --test test.csv --tokenizer CHECKPOINT --seq-length 128 --out data/mine

Bad input (an image that does not decode, a label outside the classes, an
empty file, a missing field) is one `ERROR: file[:line]: ...: expected X,
found Y` line and exit 2, and nothing is written: both files are written
under temporary names and renamed only once both are whole.
"""
import argparse
import csv
import json
import os
import struct
import sys
import tempfile

MAGIC = b"EPDATA01"
IMAGES, TOKENS = 1, 2
HEADER = struct.Struct("<8sIIQIIIIQQQQQQQ32x")
ALIGN = 64


class BadInput(Exception):
    pass


def fail(where, expected, found):
    raise BadInput(f"{where}: expected {expected}, found {found}")


def aligned(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def write_split(path, kind, labels, class_names, shape, samples, lengths=None, pad_id=0, norm=None):
    """One split's file: header, labels, lengths or normalisation, class names, samples."""
    import numpy as np
    count = len(labels)
    names = "".join(n + "\n" for n in class_names).encode()
    labels_b = np.asarray(labels, dtype="<i4").tobytes()
    second = np.asarray(lengths if kind == TOKENS else norm, dtype="<i4" if kind == TOKENS else "<f4").tobytes()
    at = aligned(HEADER.size)
    labels_at, at = at, aligned(at + len(labels_b))
    second_at, at = at, aligned(at + len(second))
    names_at, at = at, aligned(at + len(names))
    samples_at = at
    size = samples_at + samples.nbytes
    dims = list(shape) + [0] * (3 - len(shape))
    header = HEADER.pack(MAGIC, kind, len(class_names), count, *dims, pad_id, labels_at,
                         second_at if kind == TOKENS else 0, samples_at, second_at if kind == IMAGES else 0,
                         names_at, len(names), size)
    with open(path, "wb") as f:
        for offset, data in ((0, header), (labels_at, labels_b), (second_at, second), (names_at, names)):
            f.seek(offset)
            f.write(data)
        f.seek(samples_at)
        f.write(np.ascontiguousarray(samples).tobytes())
        f.truncate(size)


# ---- images -----------------------------------------------------------------

def image_classes(folder):
    if not os.path.isdir(folder):
        fail(folder, "a folder of class subfolders", "no such folder")
    names = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
    if not names:
        fail(folder, "a folder of class subfolders", "no subfolder")
    return names


def read_images(folder, classes, size, channels):
    import numpy as np
    from PIL import Image, UnidentifiedImageError
    mode = {1: "L", 3: "RGB"}[channels]
    pixels, labels = [], []
    for name in image_classes(folder):
        if name not in classes:
            fail(os.path.join(folder, name), "a class of the training folder (" + "|".join(classes) + ")",
                 f"class '{name}'")
        sub = os.path.join(folder, name)
        for file in sorted(os.listdir(sub)):
            path = os.path.join(sub, file)
            if not os.path.isfile(path):
                continue
            try:
                with Image.open(path) as im:
                    im = im.convert(mode).resize((size, size), Image.BILINEAR)
                    a = np.asarray(im, dtype=np.uint8)
            except (UnidentifiedImageError, OSError, ValueError) as e:
                fail(path, "an image Pillow can decode", str(e).splitlines()[0] if str(e) else type(e).__name__)
            pixels.append(a.reshape(size, size, channels).transpose(2, 0, 1))
            labels.append(classes.index(name))
    if not pixels:
        fail(folder, "at least one image", "none")
    return np.stack(pixels), labels


def normalisation(checkpoint, channels):
    mean, std = [0.5] * channels, [0.5] * channels  # ViTImageProcessor's defaults
    path = os.path.join(checkpoint, "preprocessor_config.json") if checkpoint else None
    if path and os.path.isfile(path):
        with open(path) as f:
            cfg = json.load(f)
        mean, std = cfg.get("image_mean", mean), cfg.get("image_std", std)
        if len(mean) != channels or len(std) != channels or not all(s > 0 for s in std):
            fail(path, f"image_mean and image_std of {channels} channels, std > 0", f"{mean}, {std}")
    return mean + std


def prepare_images(a):
    classes = image_classes(a.train)
    channels = a.channels
    if a.checkpoint and channels is None:
        with open(os.path.join(a.checkpoint, "config.json")) as f:
            channels = json.load(f).get("num_channels", 3)
    channels = channels or 3
    if channels not in (1, 3):
        fail("--channels", "1 or 3", channels)
    norm = normalisation(a.checkpoint, channels)
    splits = {}
    for split, folder in (("train", a.train), ("test", a.test)):
        pixels, labels = read_images(folder, classes, a.image_size, channels)
        splits[split] = dict(kind=IMAGES, labels=labels, class_names=classes, shape=pixels.shape[1:],
                             samples=pixels, norm=norm)
    return splits


# ---- text -------------------------------------------------------------------

def read_rows(path, text_field, label_field):
    """[(line, text, label)] of a CSV (header row) or JSON-lines file."""
    if not os.path.isfile(path):
        fail(path, "a CSV or JSON-lines file", "no such file")
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        try:
            if path.endswith(".csv"):
                reader = csv.DictReader(f)
                for field in (text_field, label_field):
                    if reader.fieldnames is None or field not in reader.fieldnames:
                        fail(f"{path}:1", f"a header row naming '{field}'", reader.fieldnames or "an empty file")
                for row in reader:
                    if row.get(text_field) is None or row.get(label_field) is None:
                        fail(f"{path}:{reader.line_num}", f"fields '{text_field}' and '{label_field}'", "a short row")
                    rows.append((reader.line_num, row[text_field], row[label_field].strip()))
            else:
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as e:
                        fail(f"{path}:{n}", "a JSON object per line", f"invalid JSON ({e.msg})")
                    if not isinstance(obj, dict) or not isinstance(obj.get(text_field), str) or \
                            not isinstance(obj.get(label_field), (str, int)) or isinstance(obj.get(label_field), bool):
                        fail(f"{path}:{n}", f"an object with a string '{text_field}' and a string or integer "
                             f"'{label_field}'", line.strip()[:60])
                    rows.append((n, obj[text_field], str(obj[label_field])))
        except UnicodeDecodeError as e:
            fail(path, "UTF-8 text", f"byte {e.start}: {e.reason}")
    if not rows:
        fail(path, "at least one (text, label) row", "none")
    return rows


def sorted_labels(labels):
    if all(l.lstrip("-").isdigit() for l in labels):
        return sorted(labels, key=int)
    return sorted(labels)


def prepare_text(a):
    import numpy as np
    from transformers import AutoTokenizer
    train = read_rows(a.train, a.text_field, a.label_field)
    test = read_rows(a.test, a.text_field, a.label_field)
    classes = a.classes.split(",") if a.classes else sorted_labels(sorted({l for _, _, l in train}))
    tok = AutoTokenizer.from_pretrained(a.tokenizer, local_files_only=True)
    if tok.pad_token_id is None:
        fail(a.tokenizer, "a tokenizer with a pad token", "none")
    splits = {}
    for split, path, rows in (("train", a.train, train), ("test", a.test, test)):
        labels = []
        for line, _, label in rows:
            if label not in classes:
                fail(f"{path}:{line}: label", "one of the classes " + "|".join(classes)[:200], f"'{label}'")
            labels.append(classes.index(label))
        enc = tok([t for _, t, _ in rows], truncation=True, max_length=a.seq_length, padding="max_length")
        ids = np.asarray(enc["input_ids"], dtype=np.int32)
        mask = np.asarray(enc["attention_mask"], dtype=np.int32)
        lengths = mask.sum(axis=1)
        if tok.padding_side != "right" or not (mask == (np.arange(a.seq_length)[None, :] < lengths[:, None])).all():
            fail(a.tokenizer, "a tokenizer that pads on the right", tok.padding_side)
        splits[split] = dict(kind=TOKENS, labels=labels, class_names=classes, shape=(a.seq_length,), samples=ids,
                             lengths=lengths, pad_id=tok.pad_token_id)
    return splits


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="kind", required=True)
    im = sub.add_parser("images", help="a folder of class subfolders per split")
    im.add_argument("--image-size", type=int, required=True)
    im.add_argument("--checkpoint", help="a ViT checkpoint folder: its normalisation and num_channels")
    im.add_argument("--channels", type=int, help="1 (grey) or 3 (RGB; the default)")
    tx = sub.add_parser("text", help="a CSV or JSON-lines file of (text, label) per split")
    tx.add_argument("--tokenizer", required=True, help="the checkpoint folder whose tokenizer to use")
    tx.add_argument("--seq-length", type=int, required=True)
    tx.add_argument("--text-field", default="text")
    tx.add_argument("--label-field", default="label")
    tx.add_argument("--classes", help="the labels in class order, comma-separated (default: sorted)")
    for s in (im, tx):
        s.add_argument("--train", required=True)
        s.add_argument("--test", required=True)
        s.add_argument("--out", required=True, help="the folder for train.epdata and test.epdata")
    a = p.parse_args(argv)
    if not os.path.isdir(os.path.dirname(os.path.abspath(a.out))):
        fail("--out " + a.out, "a folder whose parent exists", "no parent folder")
    splits = prepare_images(a) if a.kind == "images" else prepare_text(a)
    out = os.path.abspath(a.out)
    parent = os.path.dirname(out)
    temps = {}
    try:
        for split, s in splits.items():
            fd, temps[split] = tempfile.mkstemp(prefix=f".{split}.", suffix=".epdata", dir=parent)
            os.close(fd)
            write_split(temps[split], **s)
        os.makedirs(out, exist_ok=True)
        for split, tmp in temps.items():
            os.replace(tmp, os.path.join(out, f"{split}.epdata"))
    finally:
        for tmp in temps.values():
            if os.path.exists(tmp):
                os.remove(tmp)
    for split, s in splits.items():
        print(f"{os.path.join(out, split + '.epdata')}: {len(s['labels'])} samples, {len(s['class_names'])} classes")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as e:
        print(f"ERROR: {e}", file=sys.stderr)
        sys.exit(2)
