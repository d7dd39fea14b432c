#!/usr/bin/env python3
"""Config fuzzing: seeded mutations of the shipped small configs, run on
`elasticpipe plan` and a short `elasticpipe simulate`; then the fixed
hostile inputs of hostile_inputs.py (special files, nesting, a full disk,
parser errors, 64-bit counts, ...).

Every run must exit 0, or exit 2 with one `ERROR:` line that names the
mutant file (file:line:col and the key, where the input has a line) or the
--set flag; never a signal, another exit code, a traceback-like dump, or
more than a few seconds.

usage: fuzz_configs.py ELASTICPIPE ROOT [--mutants N] [--seed S] [--jobs J] [--config FILE ...]
A failure prints the seed, the mutation and the mutant's path (kept under
--keep DIR, default a temporary folder) so that it can be replayed.
"""
import argparse
import concurrent.futures
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

from hostile_inputs import run_hostile

# Values a hostile or careless user writes. Strings are TOML text.
HUGE = ["4294967298", "2147483648", "9223372036854775807", "-9223372036854775808", "1e18", "1e300", "1e-300",
        "99999999999999999999", "0x7fffffff", "1_000_000_000_000"]
NON_FINITE = ["nan", "inf", "-inf", "+inf", "-nan"]
OTHER_TYPES = ['"text"', '""', "true", "false", "[1, 2]", "[]", "{ a = 1 }", "1.5", "7", "1979-05-27"]
GARBAGE = ["\x00", "\xff\xfe", "[[", "= =", "]", '"unterminated', "key", "\\", "#" * 3, "\t\r", "ü", "[cluster]"]

# Valid values of the config's string keys: a mutant with another one is
# usually accepted, and then planned and simulated.
CHOICES = {
    "schedule": ['"gpipe"', '"1f1b"', '"looping_bf"', '"looping_df"'],
    "partitioner": ['"greedy"', '"optimal"'],
    "compression": ['"none"', '"paper"', '"memory"'],
    "cache": ['"off"', '"on"', '"auto"'],
    "objective": ['"time"', '"paper"'],
    "freeze_policy": ['"none"', '"alpha"', '"gradient_norm"'],
    "freeze_rounding": ['"floor_progress"', '"floor"', '"round"', '"ceil"'],
    "optimizer": ['"sgd"', '"adam"', '"adamw"'],
    "precision": ['"fp32"', '"bf16"'],
    "checkpointing": ['"never"', '"except_last"', '"always"'],
    "family": ['"vit"', '"bert"'],
}


def perturb(old, rng):
    """A number scaled by a plausible factor (an integer stays one)."""
    factor = rng.choice([0.5, 2, 3, 4, 8, 0.25, 10])
    if re.fullmatch(r"[+-]?[0-9]+", old):
        return str(max(1, int(int(old) * factor)))
    try:
        return repr(float(old) * factor)
    except ValueError:
        return old


KEY_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*(#.*)?$")


def key_lines(lines):
    return [i for i, line in enumerate(lines) if KEY_LINE.match(line)]


def set_value(lines, i, value):
    m = KEY_LINE.match(lines[i])
    lines[i] = f"{m.group(1)} = {value}"
    return m.group(1)


def mutate(text, rng):
    """One mutation of `text`: (the mutant, a one-line description)."""
    lines = text.split("\n")
    keys = key_lines(lines)
    kind = rng.choice(["delete", "type", "zero", "negative", "huge", "nonfinite", "truncate", "garbage",
                       "duplicate", "scale", "two", "perturb", "perturb", "choice", "choice"])
    if not keys and kind not in ("two", "truncate"):
        kind = "garbage"  # nothing left to mutate key by key (an earlier truncation)
    if kind == "two":  # two mutations at once
        once, first = mutate(text, rng)
        twice, second = mutate(once, rng)
        return twice, first + "; then " + second
    if kind == "truncate":
        cut = rng.randrange(len(text) + 1)
        return text[:cut], f"truncated at byte {cut}"
    if kind == "garbage":
        at = rng.randrange(len(text) + 1)
        junk = rng.choice(GARBAGE)
        return text[:at] + junk + text[at:], f"inserted {junk!r} at byte {at}"
    i = rng.choice(keys)
    line = lines[i]
    if kind == "delete":
        del lines[i]
        return "\n".join(lines), f"deleted line {i + 1} ({line.strip()})"
    if kind == "duplicate":
        lines.insert(i, line)
        return "\n".join(lines), f"duplicated line {i + 1} ({line.strip()})"
    old = KEY_LINE.match(line).group(2)
    if kind == "choice":  # another valid-looking choice for a string key, or a flipped boolean
        key = KEY_LINE.match(line).group(1)
        options = CHOICES.get(key, ["true", "false"] if old in ("true", "false") else None)
        if options:
            value = rng.choice(options)
            set_value(lines, i, value)
            return "\n".join(lines), f"line {i + 1}: {key} = {value} (was {old})"
        kind = "perturb"
    value = {
        "type": lambda: rng.choice(OTHER_TYPES),
        "zero": lambda: rng.choice(["0", "0.0", "-0.0"]),
        "negative": lambda: "-" + old.lstrip("+-") if re.match(r"^[+-]?[0-9.]", old) else "-1",
        "huge": lambda: rng.choice(HUGE),
        "nonfinite": lambda: rng.choice(NON_FINITE),
        # Plausible values: most such configs plan and simulate.
        "perturb": lambda: perturb(old, rng),
        "scale": lambda: old + rng.choice(["e9", "e-9", "000000", "e300"]) if re.match(r"^[0-9]+$", old) else old + "e30",
    }[kind]()
    key = set_value(lines, i, value)
    return "\n".join(lines), f"line {i + 1}: {key} = {value} (was {old})"


def run(cmd, limit_s):
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=limit_s, text=True, errors="replace")
    except subprocess.TimeoutExpired:
        return None, "", time.monotonic() - t0
    return p.returncode, p.stdout + p.stderr, time.monotonic() - t0


def judge(rc, output, seconds, mutant, limit_s):
    """None when the run behaved, else why not."""
    if rc is None:
        return f"still running after {limit_s} s"
    if rc < 0:
        return f"killed by signal {-rc}"
    if rc not in (0, 2):
        return f"exit code {rc}"
    if "AddressSanitizer" in output or "runtime error:" in output:
        return "a sanitizer report"
    if rc == 2:
        errors = [line for line in output.splitlines() if line.startswith("ERROR: ")]
        if len(errors) != 1:
            return f"{len(errors)} ERROR lines, expected 1"
        if not (errors[0].startswith("ERROR: " + mutant) or errors[0].startswith("ERROR: --set ")):
            return "the ERROR line names neither the config file nor the flag"
        # A key's error names its line whenever the key (or its section)
        # is in the file.
        m = re.match(r"ERROR: " + re.escape(mutant) + r"(:\d+:\d+)?: key '", errors[0])
        if "key '" in errors[0] and errors[0].startswith("ERROR: " + mutant):
            if not m:
                return "a key's error in another shape than file:line:col: key '...'"
            if m.group(1) is None and "section" not in errors[0]:
                return "a key's error without file:line"
    return None


def check_one(n, source, mutant_text, what, args, workdir):
    mutant = os.path.join(workdir, f"mutant{n}.toml")
    with open(mutant, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(mutant_text)
    out = os.path.join(workdir, f"out{n}")
    failures = []
    # Small enough to simulate in well under a second.
    sim_set = ["--set", "data.num_train_samples=1024", "--set", "training.epochs=2"]
    for cmd in ([args.bin, "plan", mutant],
                [args.bin, "simulate", mutant, "--mode", "baseline,autocache", "--out", out] + sim_set):
        rc, output, seconds = run(cmd, args.limit)
        why = judge(rc, output, seconds, mutant, args.limit)
        if why:
            failures.append(f"{' '.join(cmd[1:3])}: {why}\n    mutation of {source}: {what}\n"
                            f"    output: {output.strip()[:600]}")
            break
        if rc != 0:
            break  # refused by plan: simulate loads the same file
    shutil.rmtree(out, ignore_errors=True)
    if not failures:
        os.remove(mutant)
    return failures, (rc == 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("root")
    ap.add_argument("--mutants", type=int, default=int(os.environ.get("FUZZ_MUTANTS", "400")))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", "14")))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=float, default=float(os.environ.get("FUZZ_LIMIT_S", "5")),
                    help="seconds one command may take")
    ap.add_argument("--keep", help="folder for the mutants (kept when they fail)")
    ap.add_argument("--config", action="append", help="config to mutate (repeatable; default: the small ones)")
    args = ap.parse_args()

    sources = args.config or [os.path.join(args.root, "configs", "small", f) for f in sorted(os.listdir(
        os.path.join(args.root, "configs", "small"))) if f.endswith(".toml")] + [
        os.path.join(args.root, "configs", "fashion_mnist_vit_tiny.toml")]
    texts = {s: open(s, encoding="utf-8").read() for s in sources}
    rng = random.Random(args.seed)
    workdir = args.keep or tempfile.mkdtemp(prefix="ep_fuzz_")
    os.makedirs(workdir, exist_ok=True)
    cases = []
    for n in range(args.mutants):
        source = sources[n % len(sources)]
        text, what = mutate(texts[source], rng)
        cases.append((n, source, text, what))

    t0 = time.monotonic()
    failures, accepted = [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for f, ok in pool.map(lambda c: check_one(*c, args, workdir), cases):
            failures.extend(f)
            accepted += ok
    elapsed = time.monotonic() - t0
    for f in failures:
        print("FAIL:", f)
    print(f"fuzz: {args.mutants} mutants (seed {args.seed}) in {elapsed:.1f} s: {accepted} accepted, "
          f"{args.mutants - accepted - len(failures)} refused with exit 2, {len(failures)} failed"
          + (f"; mutants kept in {workdir}" if failures else ""))
    if not failures and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)

    t0 = time.monotonic()
    hostile_dir = os.path.join(args.keep, "hostile") if args.keep else None
    # The sanitizer build's --limit is raised with its slowdown; the hostile
    # cases' time and memory bounds follow.
    hostile, ran, notes = run_hostile(os.path.abspath(args.bin), args.root, hostile_dir, max(1.0, args.limit / 5))
    for n in notes:
        print("note:", n)
    for f in hostile:
        print("FAIL:", f)
    print(f"hostile inputs: {ran} cases in {time.monotonic() - t0:.1f} s, {len(hostile)} failed")
    return 1 if failures or hostile else 0


if __name__ == "__main__":
    sys.exit(main())
