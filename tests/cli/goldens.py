#!/usr/bin/env python3
"""Goldens of the commands the README shows, and the figures it quotes.

tests/golden/commands/NAME.txt holds one command and its full output,
SimGrid's .tesh habit: the first line is `$ elasticpipe ARGS`, the rest is
what it prints (stdout; then `--- stderr` and stderr where it wrote any).
Each runs in a fresh folder where `configs` is the repository's, so the
paths it prints are the README's.

Checks, each failing the test:
  - every golden's command prints its golden output, byte for byte;
  - every `elasticpipe` command in a README code block is a golden's, or
    one of MEASURED below (its output is timed, so a golden cannot hold
    it; the test named there runs it);
  - every output line the README shows under a command (its `...` parts
    elided) is in that command's golden, in order;
  - the README synopsis names no option its subcommand's --help lacks;
  - the speedups the README and docs/RESULTS.md quote, and the table
    docs/figures/overall.md holds, are the goldens' (the simulations
    that make them are deterministic).

usage: goldens.py BINARY [--update]   (BINARY: build/elasticpipe)
  --update  rewrites every golden from its own command (then review the
            diff: `git diff tests/golden/commands`).
"""
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDENS = os.path.join(ROOT, "tests", "golden", "commands")
PAPER = ["vit_imagenet", "vit_cifar100", "bert_large_squad", "bert_base_sst2"]

# README commands whose output is measured (times, and the plans chosen
# from timings), with the test that runs each.
MEASURED = {
    "train": "cli, cli_multiprocess (tests/cli/run_*_tests.sh)",
    "profile": "cli (tests/cli/run_cli_tests.sh)",
    "validate": "cli (tests/cli/run_cli_tests.sh)",
    "trace diff": "cli (tests/cli/run_cli_tests.sh)",
}

# The one part of a golden's output that is timed: sweep's progress line.
MASKS = [(re.compile(r"\d+ s elapsed, about \d+ s left"), "N s elapsed, about N s left")]

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def read_golden(path):
    with open(path, encoding="utf-8") as f:
        first, _, output = f.read().partition("\n")
    if not first.startswith("$ elasticpipe "):
        sys.exit(f"ERROR: {path}:1: expected '$ elasticpipe ARGS', found {first!r}")
    return shlex.split(first[2:])[1:], output


def run(binary, args):
    with tempfile.TemporaryDirectory() as cwd:
        os.symlink(os.path.join(ROOT, "configs"), os.path.join(cwd, "configs"))
        p = subprocess.run([binary] + args, cwd=cwd, capture_output=True, text=True, timeout=600)
    out = p.stdout + (f"--- stderr\n{p.stderr}" if p.stderr else "")
    for pattern, text in MASKS:
        out = pattern.sub(text, out)
    if p.returncode != 0:
        out += f"--- exit {p.returncode}\n"
    return out


def goldens():
    return sorted(os.path.join(GOLDENS, n) for n in os.listdir(GOLDENS) if n.endswith(".txt"))


def check_outputs(binary, update):
    held = {}
    for path in goldens():
        args, want = read_golden(path)
        got = run(binary, args)
        name = os.path.relpath(path, ROOT)
        if update and got != want:
            with open(path, "w", encoding="utf-8") as f:
                f.write("$ " + shlex.join(["elasticpipe"] + args) + "\n" + got)
            print(f"updated {name}")
        elif got != want:
            diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), name, "now"))
            fail(f"{name}: `elasticpipe {shlex.join(args)}` prints otherwise:\n{diff}")
        held[shlex.join(args)] = got
    return held


def readme_blocks():
    """(line number, text) of each line inside the README's code blocks, per block."""
    blocks, block = [], None
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("```"):
                if block is not None:
                    blocks.append(block)
                block = [] if block is None else None
                continue
            if block is not None:
                block.append((n, line.rstrip("\n")))
    return blocks


def command_of(line):
    """The elasticpipe arguments a README line runs, else None."""
    m = re.match(r"^(?:\$ |bash scripts/setup\.sh && )?\./build/elasticpipe (.*)$", line)
    return shlex.split(m.group(1)) if m else None


def check_readme(binary, held):
    blocks = readme_blocks()
    for block in blocks:
        lines = list(block)
        # A command continued with `\` is one command.
        while lines:
            n, line = lines.pop(0)
            while line.endswith("\\") and lines:
                line = line[:-1] + lines.pop(0)[1].strip()
            args = command_of(line)
            if args is None:
                continue
            key = shlex.join(args)
            sub = " ".join(args[:2]) if args[0] == "trace" else args[0]
            if key not in held and sub not in MEASURED:
                fail(f"README.md:{n}: `elasticpipe {key}` has no golden: add tests/golden/commands/NAME.txt "
                     f"with first line `$ elasticpipe {key}`, then run goldens.py --update")
            if not line.startswith("$ ") or key not in held:
                continue
            # The output lines shown under it, up to the next command.
            output = held[key].splitlines()
            at = 0
            while lines and command_of(lines[0][1]) is None:
                shown_n, shown = lines.pop(0)
                if shown.strip() == "...":
                    continue
                parts = [p for p in shown.split(" ... ") if p.strip()]
                for i in range(at, len(output)):
                    pos = 0
                    for p in parts:
                        pos = output[i].find(p, pos)
                        if pos < 0:
                            break
                        pos += len(p)
                    if pos >= 0:
                        at = i + 1
                        break
                else:
                    fail(f"README.md:{shown_n}: shown as output of `elasticpipe {key}` but not printed by it "
                         f"(in order): {shown!r}")
    # The synopsis: every option it names is in its subcommand's --help.
    for block in blocks:
        for n, line in block:
            m = re.match(r"^elasticpipe ((?:trace )?[a-z]+) ", line)
            if not m:
                continue
            helptext = run(binary, m.group(1).split() + ["--help"])
            for opt in sorted(set(re.findall(r"--[a-z][a-z-]*", line))):
                if opt not in helptext:
                    fail(f"README.md:{n}: the synopsis of `{m.group(1)}` names {opt}, which its --help lacks")


def speedup(output, mode):
    m = re.search(rf"^  {mode} +\S+ +\S+ +\S+ +([0-9.]+)x ", output, re.M)
    return m.group(1) if m else None


def check_quoted(held):
    """The speedups the README, RESULTS and overall.md quote are the goldens'."""
    rows = {
        "over the best plan without freezing, same global batch": "",
        "over GPipe, global batch grows 4–8×, `objective = \"time\"`":
            " --reference gpipe --set 'training.batch_policy=\"per_pipeline\"'",
        "over GPipe, global batch grows 2–4×, `objective = \"paper\"`":
            " --reference gpipe --set planner.objective=paper --set 'training.batch_policy=\"per_pipeline\"'",
    }
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    with open(os.path.join(ROOT, "docs", "RESULTS.md"), encoding="utf-8") as f:
        results = f.read()
    wanted = {}
    for label, extra in rows.items():
        got = []
        for c in PAPER:
            key = f"simulate configs/paper/{c}.toml{extra}"
            if key not in held:
                fail(f"no golden of `elasticpipe {key}`")
                return
            got.append(speedup(held[key], "autocache"))
        wanted[label] = got
        m = re.search(r"^\| " + re.escape(label) + r" \|(.*)\|$", readme, re.M)
        quoted = re.findall(r"([0-9.]+)×", m.group(1)) if m else None
        if quoted != got:
            fail(f"README.md: the row '{label}' quotes {quoted}, the simulations give {got}")
    for label, row in [("over the best plan without freezing, same global batch", "Full method against the best static plan"),
                       ("over GPipe, global batch grows 2–4×, `objective = \"paper\"`", "The paper's figures, over its GPipe")]:
        m = re.search(r"^\| " + re.escape(row) + r"[^(]*\(([^)]*)\)", results, re.M)
        quoted = re.findall(r"([0-9.]+)×", m.group(1)) if m else None
        if quoted != wanted[label]:
            fail(f"docs/RESULTS.md: the row '{row}' quotes {quoted}, the simulations give {wanted[label]}")
    scale = "simulate configs/scale/vit_imagenet_dgx_h100.toml"
    m = re.search(r"At 1,024 H100s \(`configs/scale/vit_imagenet_dgx_h100.toml`, 10 epochs\) it is ([0-9.]+)×", readme)
    if scale not in held or not m or m.group(1) != speedup(held[scale], "autocache"):
        fail(f"README.md: the 1,024-H100 speedup quoted ({m.group(1) if m else None}) is not "
             f"`elasticpipe {scale}`'s ({speedup(held.get(scale, ''), 'autocache')})")
    # docs/figures/overall.md (scripts/figures.sh): GPipe's time, the method's, the speedup.
    paper_extra = rows["over GPipe, global batch grows 2–4×, `objective = \"paper\"`"]
    with open(os.path.join(ROOT, "docs", "figures", "overall.md"), encoding="utf-8") as f:
        overall = f.read()
    for c in PAPER:
        out = held[f"simulate configs/paper/{c}.toml{paper_extra}"]
        times = {mode: re.search(rf"^  {mode} +([0-9.]+) ", out, re.M).group(1) for mode in ("gpipe", "autocache")}
        want = [f"{float(times['gpipe']):,.1f}", f"{float(times['autocache']):,.1f}", speedup(out, "autocache")]
        m = re.search(rf"^\| {c} \| autocache \| ([0-9,.]+) \| ([0-9,.]+) \| ([0-9.]+) \|", overall, re.M)
        if not m or list(m.groups()) != want:
            fail(f"docs/figures/overall.md: the row of {c} holds {list(m.groups()) if m else None}, "
                 f"the simulation gives {want} (bash scripts/figures.sh docs/figures regenerates it)")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    update = "--update" in sys.argv[2:]
    held = check_outputs(binary, update)
    if update:
        return 0
    check_readme(binary, held)
    check_quoted(held)
    print(f"{len(held)} goldens, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
