"""points.csv, the table of bench/where_it_pays.py: its one writer,
its one strict reader and the crossover both the bench and
plots/where_it_pays.py report.

One row per simulated training (a model's config, a cluster size, a
training length), comma-separated, a header first, in this order:

| column | meaning |
| --- | --- |
| model | the name of the model and data set in the figure and the tables |
| config | the config file simulated |
| nodes, gpus | cluster.nodes, and nodes x cluster.gpus_per_node |
| epochs, freeze_interval_epochs | training.epochs, planner.freeze_interval_epochs |
| baseline_s | simulated time of the best plan without freezing (mode baseline) |
| method_s | simulated time of the full method (mode autocache) |
| speedup | baseline_s / method_s; empty where the baseline does not fit memory |
| baseline_fits, method_fits | 1 where that mode's plans fit device memory, else 0 |
| global_batch, updates | the baseline's global batch and optimizer updates (the method trains the same) |

Python 3 standard library only.
"""
import csv
import math
import re

COLUMNS = ("model", "config", "nodes", "gpus", "epochs", "freeze_interval_epochs", "baseline_s", "method_s",
           "speedup", "baseline_fits", "method_fits", "global_batch", "updates")
INTS = ("nodes", "gpus", "epochs", "freeze_interval_epochs", "global_batch", "updates")
FLOATS = ("baseline_s", "method_s", "speedup")
BOOLS = ("baseline_fits", "method_fits")


def write_results(path, rows):
    """rows: dicts keyed by COLUMNS (speedup None where there is none)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow(["" if r[c] is None else int(r[c]) if c in BOOLS else r[c] for c in COLUMNS])


def _parse(column, text):
    if column in INTS:
        if not re.fullmatch(r"[0-9]+", text):
            raise ValueError("a non-negative integer")
        return int(text)
    if column in BOOLS:
        if text not in ("0", "1"):
            raise ValueError("0 or 1")
        return text == "1"
    if column in FLOATS:
        if text == "" and column == "speedup":
            return None
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0) or text != text.strip():
            raise ValueError("a positive number" + (" or nothing" if column == "speedup" else ""))
        return value
    if text == "":
        raise ValueError("a name")
    return text


def read_results(path):
    """The rows of a points.csv, typed; ValueError naming the file,
    line and column of the first thing that is not as written above."""
    with open(path, encoding="utf-8", newline="") as f:
        lines = list(csv.reader(f))
    if not lines:
        raise ValueError(f"{path}: empty file; expected the header {','.join(COLUMNS)}")
    if tuple(lines[0]) != COLUMNS:
        missing = [c for c in COLUMNS if c not in lines[0]]
        what = f"missing column '{missing[0]}'" if missing else "unknown or reordered columns"
        raise ValueError(f"{path}:1: header: {what}; expected {','.join(COLUMNS)}")
    rows, seen = [], {}
    for line_no, fields in enumerate(lines[1:], start=2):
        if len(fields) != len(COLUMNS):
            raise ValueError(f"{path}:{line_no}: expected {len(COLUMNS)} fields, found {len(fields)}")
        row = {}
        for column, text in zip(COLUMNS, fields):
            try:
                row[column] = _parse(column, text)
            except ValueError as e:
                raise ValueError(f"{path}:{line_no}: column '{column}': expected {e}, found '{text}'") from None
        key = (row["model"], row["gpus"], row["epochs"])
        if key in seen:
            raise ValueError(f"{path}:{line_no}: {key[0]}, {key[1]} GPUs, {key[2]} epochs again (line {seen[key]})")
        seen[key] = line_no
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def lines_of(rows):
    """{(model, epochs): rows sorted by gpus}, models and lengths in first-seen order."""
    out = {}
    for r in rows:
        out.setdefault((r["model"], r["epochs"]), []).append(r)
    return {k: sorted(v, key=lambda r: r["gpus"]) for k, v in out.items()}


def pays(speedup):
    """The method gains: its speedup shown to three decimals is above 1.000.
    At 1.000 the planner kept the static plan at every freeze step (or its
    gain rounds away); below, the simulated run lost to the baseline."""
    return round(speedup, 3) > 1.0


def crossover(line):
    """The first row of a line (sorted by gpus) with a speedup that does not
    pay; None where every measured point pays."""
    return next((r for r in line if r["speedup"] is not None and not pays(r["speedup"])), None)
