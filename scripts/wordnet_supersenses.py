#!/usr/bin/env python3
"""A real labelled text corpus that installs offline: WordNet's noun
definitions (Debian's wordnet-base) labelled with the lexicographer file
each synset was filed in (its supersense: noun.animal, noun.food, ...).
The label is WordNet's lexicographers', not a rule of ours; the text is a
definition without its headword or its examples, so a classifier has to
read what the definition says.

  wordnet_supersenses.py OUT [--train-per-class N] [--test-per-class N]

writes OUT/train.jsonl and OUT/test.jsonl ({"text", "label"} per line),
balanced over eight supersenses, split by a seeded shuffle of each class's
synsets (train and test never share a synset), for scripts/prepare_data.py.
"""
import argparse
import json
import os
import random
import sys

WORDNET = "/usr/share/wordnet"
CLASSES = ["noun.animal", "noun.artifact", "noun.body", "noun.food", "noun.location", "noun.person", "noun.plant",
           "noun.substance"]


# The lexicographer files' numbers (WordNet 3.0, lexnames(5WN)), as data.noun writes them.
LEXNAMES = {5: "noun.animal", 6: "noun.artifact", 8: "noun.body", 13: "noun.food", 15: "noun.location",
            18: "noun.person", 20: "noun.plant", 27: "noun.substance"}


def definitions(root):
    """{supersense: [definition]} of the noun synsets of CLASSES."""
    out = {}
    with open(os.path.join(root, "data.noun"), encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("  ") or " | " not in line:
                continue  # the licence header
            fields, gloss = line.split(" | ", 1)
            label = LEXNAMES.get(int(fields.split()[1]))
            definition = gloss.split('; "')[0].strip().rstrip(";").strip()
            if label and definition:
                out.setdefault(label, []).append(definition)
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--train-per-class", type=int, default=400)
    p.add_argument("--test-per-class", type=int, default=100)
    a = p.parse_args(argv)
    if not os.path.isfile(os.path.join(WORDNET, "data.noun")):
        print(f"ERROR: {WORDNET}/data.noun: expected WordNet's noun database, found no such file "
              "(apt-get install wordnet-base; scripts/setup.sh installs it)", file=sys.stderr)
        return 2
    by_class = definitions(WORDNET)
    rng = random.Random(0)
    splits = {"train": [], "test": []}
    for label in CLASSES:
        texts = sorted(set(by_class[label]))
        rng.shuffle(texts)
        need = a.test_per_class + a.train_per_class
        if len(texts) < need:
            print(f"ERROR: {WORDNET}/data.noun: {label}: expected {need} definitions, found {len(texts)}",
                  file=sys.stderr)
            return 2
        splits["test"] += [(t, label) for t in texts[:a.test_per_class]]
        splits["train"] += [(t, label) for t in texts[a.test_per_class:need]]
    os.makedirs(a.out, exist_ok=True)
    for split, rows in splits.items():
        rng.shuffle(rows)
        with open(os.path.join(a.out, split + ".jsonl"), "w") as f:
            f.writelines(json.dumps({"text": t, "label": label}) + "\n" for t, label in rows)
        print(f"{os.path.join(a.out, split + '.jsonl')}: {len(rows)} definitions, {len(CLASSES)} supersenses")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
