"""Shared plumbing of the figure scripts.

Each script BUILDS a Figure from trace files (plain data: panels of series,
plus an optional table), then main() DRAWS it. `--describe FILE.json` writes
the Figure itself, so tests check the data a picture shows without reading
pixels.
"""
import argparse
import csv
import json
import os
import sys
import textwrap
from dataclasses import asdict, dataclass

from eptrace import TraceError

try:
    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
except ImportError:  # the python3 on PATH may not be Debian's; main() says what to do
    plt = None

DPI = 120

# The simulator's modes: the best plan without freezing, the paper's baseline,
# the speedup breakdown's configurations (SPEC §7), each adding one
# mechanism, and the config as train runs it.
MODE_NAMES = {"baseline": "best static plan", "gpipe": "GPipe (paper's baseline)", "freeze": "freeze only",
              "autopipe": "+ AutoPipe", "autodp": "+ AutoDP", "autocache": "+ AutoCache", "configured": "as configured"}


def mode_name(mode):
    return MODE_NAMES.get(mode, mode)


@dataclass
class Series:
    label: str
    x: list
    y: list
    width: list = None   # gantt: box lengths, in x units
    text: list = None    # written on each bar or box ("" = nothing)
    marked: list = None  # line: indices of highlighted points (the chosen M)
    faded: list = None   # line: indices of points drawn hollow (does not fit memory)
    color: str = None


@dataclass
class Panel:
    kind: str  # "line"; "bar" (grouped, x = categories); "stacked" (bars); "gantt" (y = row index)
    xlabel: str
    ylabel: str
    series: list
    title: str = ""
    yticks: list = None  # gantt: the row names, top to bottom
    logy: bool = False


@dataclass
class Table:
    columns: list
    formats: list  # one str.format spec per column, for the .md
    rows: list     # None = not measured


@dataclass
class Figure:
    title: str
    panels: list
    table: Table = None


def runs_title(what, runs):
    """'what', then a line naming every config once: name (model, data, source)."""
    titles = list(dict.fromkeys(r.title for r in runs))
    return what + "\n" + textwrap.fill(", ".join(titles), 90)


# ---- drawing ---------------------------------------------------------------

def _draw_line(ax, p):
    for axis, values in ((ax.xaxis, [v for s in p.series for v in s.x]), (ax.yaxis, [v for s in p.series for v in s.y])):
        if all(type(v) is int for v in values):  # epochs, layers, M: no 2.5 ticks
            axis.set_major_locator(MaxNLocator(integer=True))
    for s in p.series:
        (line,) = ax.plot(s.x, s.y, marker="o", ms=4, label=s.label, color=s.color)
        for i in s.faded or []:
            ax.plot(s.x[i], s.y[i], marker="o", ms=7, mfc="white", color=line.get_color())
        for i in s.marked or []:
            ax.plot(s.x[i], s.y[i], marker="*", ms=15, mec="black", color=line.get_color())


def _draw_bar(ax, p):
    cats = p.series[0].x
    width = 0.8 / len(p.series)
    for j, s in enumerate(p.series):
        offset = (j - (len(p.series) - 1) / 2) * width
        have = [i for i, v in enumerate(s.y) if v is not None]  # None: not measured, no bar
        bars = ax.bar([i + offset for i in have], [s.y[i] for i in have], width, label=s.label, color=s.color)
        if s.text:
            ax.bar_label(bars, [s.text[i] for i in have], fontsize=9)
    ax.set_xticks(range(len(cats)), cats)


def _draw_stacked(ax, p):
    bottom = [0.0] * len(p.series[0].x)
    for s in p.series:
        ax.bar(s.x, s.y, 0.6, bottom=bottom, label=s.label, color=s.color)
        bottom = [b + v for b, v in zip(bottom, s.y)]


def _draw_gantt(ax, p):
    end = max((x + w for s in p.series for x, w in zip(s.x, s.width)), default=1) or 1
    ax.set_xlim(0, end * 1.01)
    px_per_x = ax.get_window_extent().width / (end * 1.01)
    for s in p.series:
        ax.barh(s.y, s.width, left=s.x, height=0.7, color=s.color, edgecolor="black", linewidth=0.4,
                label=s.label)
        for x, y, w, t in zip(s.x, s.y, s.width, s.text or []):
            if t and w * px_per_x >= 6 * len(t) + 2:  # only where the number fits inside the box
                ax.text(x + w / 2, y, t, ha="center", va="center", fontsize=8)
    ax.set_yticks(range(len(p.yticks)), p.yticks)
    ax.set_ylim(len(p.yticks) - 0.5, -0.5)  # first row on top


DRAW = {"line": _draw_line, "bar": _draw_bar, "stacked": _draw_stacked, "gantt": _draw_gantt}


def draw(fig, path):
    plt.rcParams.update({"font.size": 11, "axes.titlesize": 11, "legend.fontsize": 9})
    rows = max((len(p.yticks) for p in fig.panels if p.kind == "gantt"), default=0)
    size = (7.5 * len(fig.panels) if len(fig.panels) > 1 else 9, max(4.8, 1.6 + 0.45 * rows))
    f, axes = plt.subplots(1, len(fig.panels), figsize=size, squeeze=False)
    for ax, p in zip(axes[0], fig.panels):
        DRAW[p.kind](ax, p)
        ax.set_xlabel(p.xlabel)
        ax.set_ylabel(p.ylabel)
        ax.set_title(p.title)
        if p.logy:
            ax.set_yscale("log")
        ax.grid(axis="y" if p.kind in ("bar", "stacked") else "x" if p.kind == "gantt" else "both", alpha=0.3)
        if p.kind in ("bar", "stacked"):
            ax.tick_params(axis="x", labelrotation=15)
        if p.kind == "gantt":  # outside: boxes fill the whole plot area
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
        elif len(p.series) > 1:
            ax.legend(loc="best")
    f.suptitle(fig.title, fontsize=12)
    f.tight_layout()
    f.savefig(path, dpi=DPI)
    plt.close(f)


def write_table(table, stem):
    """stem.csv (values as read; empty = not measured) and stem.md (formatted; — = not measured)."""
    with open(stem + ".csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(table.columns)
        w.writerows([["" if v is None else v for v in row] for row in table.rows])
    align = ["---" if fmt == "{}" else "---:" for fmt in table.formats]
    lines = ["| " + " | ".join(table.columns) + " |", "| " + " | ".join(align) + " |"]
    for row in table.rows:
        cells = ["—" if v is None else fmt.format(v) for fmt, v in zip(table.formats, row)]
        lines.append("| " + " | ".join(cells) + " |")
    with open(stem + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def describe(fig):
    """The Figure as JSON-ready data, leaving out unset optional fields."""
    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items() if x is not None}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v
    return clean(asdict(fig))


# ---- command line ------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one ERROR line like every other failure, not argparse's usage dump
        raise ValueError(f"{self.prog}: {message}")


def main(doc, build, many=True, options=None, nargs=None):
    """Parse `RUN_DIR... --out FILE.png [--describe FILE.json]`, build, draw.
    nargs, where given, is argparse's for RUN_DIR ("*": the script's options
    can name the runs instead), overriding many.

    Any bad input ends with one line `ERROR: message` on stderr and exit code 2.
    """
    if plt is None:
        print(f"ERROR: {sys.executable} has no matplotlib: run the scripts with /usr/bin/python3 "
              "(apt-get install python3-matplotlib)", file=sys.stderr)
        sys.exit(2)
    try:
        parser = _Parser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("runs", nargs=nargs or ("+" if many else 1), metavar="RUN_DIR")
        parser.add_argument("--out", required=True, metavar="FILE.png",
                            help="the figure; tables go next to it as FILE.csv and FILE.md")
        parser.add_argument("--describe", metavar="FILE.json", help="also write the figure's data as JSON")
        if options:
            options(parser)
        args = parser.parse_args()
        fig = build(args)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        draw(fig, args.out)
        if fig.table:
            write_table(fig.table, os.path.splitext(args.out)[0])
        if args.describe:
            with open(args.describe, "w", encoding="utf-8") as f:
                json.dump(describe(fig), f, indent=1, ensure_ascii=False)
                f.write("\n")
    except OSError as e:
        print(f"ERROR: {e.filename}: {e.strerror}" if e.filename else f"ERROR: {e}", file=sys.stderr)
        sys.exit(2)
    except (TraceError, ValueError) as e:
        print(f"ERROR: {e}", file=sys.stderr)
        sys.exit(2)
