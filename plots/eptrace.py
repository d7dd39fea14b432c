"""The one Python reader of ElasticPipe trace files (traces/SCHEMA.md).

Every reader checks the whole file as it reads it, like the C++ readers in
traces/, and raises TraceError with a message naming the file and the line
and column (CSV) or event and field (JSON), what was expected and what was
found. Columns and fields are keyed by name, never by position.
"""
import functools
import json
import math
import os
import re
import stat
from dataclasses import dataclass

SCHEMA = "elasticpipe.trace/3"
SOURCES = ("sim", "exec")
CATEGORIES = ("forward", "backward", "frozen_forward", "cache_read", "cache_write",
              "send", "recv", "allreduce", "optimizer", "transition")
# The integer args of a span. `epoch` is written by traces/chrome_trace.cpp
# although SCHEMA.md's table does not list it yet.
SPAN_ARGS = ("stage", "microbatch", "bucket", "replica", "plan_id", "iteration", "bytes", "epoch")


class TraceError(Exception):
    """A trace file that does not follow the schema."""


# The largest file of a run (a row or a span per iteration), as the C++
# readers bound it (planner/input_file.hpp, traces/io.hpp).
MAX_FILE_BYTES = 16 << 30


def _open(path):
    """path opened for reading: a regular file within the bound, never a
    device, FIFO or directory (read until memory runs out, or waited on)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise TraceError(f"{path}: cannot open: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise TraceError(f"{path}: not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise TraceError(f"{path}: {st.st_size} bytes, expected at most {MAX_FILE_BYTES}")
    return open(path, encoding="utf-8")


# ---- CSV -------------------------------------------------------------------
# Each parser raises ValueError(what it expected).

def _int(s):
    if not re.fullmatch(r"-?[0-9]+", s):
        raise ValueError("an integer")
    return int(s)


def _bool(s):
    if s not in ("0", "1"):
        raise ValueError("0 or 1")
    return s == "1"


def _float(s):
    # float() also takes ' 1' and '1_0'; the writer never makes those.
    if s == s.strip() and "_" not in s:
        try:
            return float(s)  # 'nan' and 'inf' are allowed (a diverged loss)
        except ValueError:
            pass
    raise ValueError("a number")


def _text(s):
    return s


def _layers(s):
    parts = s.split(" ")
    if s != "-" and not (all(p.isdigit() for p in parts) and
                         all(int(a) < int(b) for a, b in zip(parts, parts[1:]))):
        raise ValueError("'-' or ascending layers like '4 7'")
    return s


def _source(s):
    if s not in SOURCES:
        raise ValueError("sim or exec")
    return s


EPOCH_COLUMNS = (
    ("source", _source), ("mode", _text), ("epoch", _int), ("plan_id", _int),
    ("frozen_layers", _int), ("frozen_inside", _layers), ("K", _int), ("M", _int), ("replicas", _int), ("cache", _bool),
    ("epoch_s", _float), ("iteration_s", _float), ("samples_per_s", _float),
    ("bubble_fraction", _float), ("exposed_comm_s", _float), ("comm_s", _float),
    ("compute_s", _float), ("cache_hit_ratio", _float), ("transition_s", _float),
    ("loss", _float), ("accuracy", _float))

CHUNK_COLUMNS = (
    ("mode", _text), ("K", _int), ("M", _int), ("replicas", _int), ("iteration_s", _float),
    ("samples_per_s", _float), ("fits_memory", _bool), ("chosen", _bool))


# Columns a file written before them lacks, and the value they read as.
LATER_COLUMNS = {"frozen_inside": "-"}


def _read_csv(path, columns):
    with _open(path) as f:
        lines = f.read().split("\n")
    if lines[-1] == "":
        lines.pop()
    names = [name for name, _ in columns]
    expected = ",".join(names)
    if not lines:
        raise TraceError(f"{path}: empty file; expected the header {expected}")
    header = lines[0].split(",")
    earlier = [(n, p) for n, p in columns if n not in LATER_COLUMNS]
    defaults = {}
    if header == [n for n, _ in earlier] and len(earlier) < len(columns):
        defaults = {n: LATER_COLUMNS[n] for n in names if n in LATER_COLUMNS}
        columns, names = earlier, [n for n, _ in earlier]
    if header != names:
        missing = [n for n in names if n not in header]
        unknown = [n for n in header if n not in names]
        what = (f"missing column '{missing[0]}'" if missing else
                f"unknown column '{unknown[0]}'" if unknown else "columns out of order")
        raise TraceError(f"{path}:1: header: {what}; expected {expected}")
    rows = []
    for line_no, line in enumerate(lines[1:], start=2):
        fields = line.split(",")
        if len(fields) != len(columns):
            raise TraceError(f"{path}:{line_no}: expected {len(columns)} fields, found {len(fields)}")
        row = {}
        for (name, parse), text in zip(columns, fields):
            try:
                row[name] = parse(text)
            except ValueError as e:
                raise TraceError(f"{path}:{line_no}: column '{name}': expected {e}, found '{text}'") from None
        row.update(defaults)
        rows.append(row)
    return rows


def frozen_count(row):
    """An epoch's frozen layers: the prefix and those frozen inside it (decision 0037)."""
    return row["frozen_layers"] + (0 if row["frozen_inside"] == "-" else len(row["frozen_inside"].split(" ")))


def read_epochs(path):
    """epochs.csv: one dict per row, typed as in SCHEMA.md §2."""
    return _read_csv(path, EPOCH_COLUMNS)


def read_chunks(path):
    """chunks.csv: the simulated chunk search, one dict per (mode, K, M)."""
    return _read_csv(path, CHUNK_COLUMNS)


# ---- JSON ------------------------------------------------------------------

def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def _load_json(path):
    with _open(path) as f:
        try:
            doc = json.load(f, parse_constant=_reject_constant)
        except ValueError as e:  # JSONDecodeError carries line and column
            raise TraceError(f"{path}: not valid JSON: {e}") from None
        except RecursionError:
            raise TraceError(f"{path}: JSON nested too deep") from None
    if not isinstance(doc, dict):
        raise TraceError(f"{path}: expected a JSON object at the top level")
    return doc


def _is(kind, v):
    # bool is an int subclass in Python; JSON true is not a number here.
    if kind == "integer":
        return type(v) is int
    if kind == "number":
        return type(v) in (int, float) and math.isfinite(v)
    if kind == "boolean":
        return type(v) is bool
    return isinstance(v, {"string": str, "object": dict, "array": list}[kind])


def _get_nullable(obj, key, where):
    if key not in obj:
        raise TraceError(f"{where}: missing field '{key}'")
    return obj[key]


def _get(obj, key, where, kind):
    if key not in obj:
        raise TraceError(f"{where}: missing field '{key}'")
    v = obj[key]
    if not _is(kind, v):
        raise TraceError(f"{where}: field '{key}': expected {'an' if kind[0] in 'aeio' else 'a'} {kind}, "
                         f"found {json.dumps(v)[:60]}")
    return v


def _check_keys(obj, keys, where):
    for k in obj:
        if k not in keys:
            raise TraceError(f"{where}: unknown field '{k}'")
    for k in keys:
        if k not in obj:
            raise TraceError(f"{where}: missing field '{k}'")


def _check_header(obj, where):
    """The fields summary.json and trace.json's otherData share."""
    schema = _get(obj, "schema", where, "string")
    if schema != SCHEMA:
        raise TraceError(f"{where}: schema '{schema}': expected '{SCHEMA}'")
    source = _get(obj, "source", where, "string")
    if source not in SOURCES:
        raise TraceError(f"{where}: source '{source}': expected sim or exec")
    _get(obj, "config", where, "string")
    metadata = _get(obj, "metadata", where, "object")
    for k, v in metadata.items():
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            raise TraceError(f"{where}: metadata '{k}': expected a string or a number, found {json.dumps(v)[:60]}")


MODE_FIELDS = ("mode", "start_s", "total_s", "samples_per_s", "speedup", "final_accuracy", "fits_memory",
               "peak_memory_bytes", "updates", "global_batch_min", "global_batch_max", "utilisation", "epoch_s")


def read_summary(path):
    """summary.json as a dict: source, config, modes (list of dicts), metadata."""
    doc = _load_json(path)
    _check_header(doc, path)  # the schema first: a newer file fails on its version
    _check_keys(doc, ("schema", "source", "config", "reference", "modes", "metadata"), path)
    reference = _get_nullable(doc, "reference", path)
    if reference is not None and not isinstance(reference, str):
        raise TraceError(f"{path}: reference: expected a mode name or null, found {json.dumps(reference)[:60]}")
    seen = set()
    for i, m in enumerate(_get(doc, "modes", path, "array")):
        where = f"{path}: modes[{i}]"
        if not isinstance(m, dict):
            raise TraceError(f"{where}: expected an object")
        _check_keys(m, MODE_FIELDS, where)
        name = _get(m, "mode", where, "string")
        if name in seen:
            raise TraceError(f"{where}: mode '{name}' appears twice")
        seen.add(name)
        for k in ("start_s", "total_s", "samples_per_s", "peak_memory_bytes", "utilisation"):
            _get(m, k, where, "number")
        for k in ("speedup", "final_accuracy"):  # null: no reference that fits, not measured
            if _get_nullable(m, k, where) is not None:
                _get(m, k, where, "number")
        for k in ("updates", "global_batch_min", "global_batch_max"):
            _get(m, k, where, "integer")
        _get(m, "fits_memory", where, "boolean")
        for j, v in enumerate(_get(m, "epoch_s", where, "array")):
            if not _is("number", v):
                raise TraceError(f"{where}: epoch_s[{j}]: expected a number, found {json.dumps(v)[:60]}")
    return doc


@dataclass
class Track:
    """One row of the timeline: a GPU (lane 0 = compute) or a link."""
    tid: int
    pid: int
    name: str
    kind: str   # "gpu" or "link"
    index: int  # the GPU's index in its node, or the link's
    lane: int
    node: int   # -1: the network between nodes


@dataclass
class Span:
    name: str
    category: str
    track: Track
    start_s: float
    end_s: float
    args: dict  # the integer args present; absent means -1

    def arg(self, key):
        return self.args.get(key, -1)


@dataclass
class Flow:
    id: int
    start: int  # indices into Trace.spans: the send ...
    end: int    # ... and its receive


@dataclass
class Trace:
    source: str
    config: str
    mode: str
    metadata: dict
    tracks: list  # in tid order
    spans: list   # in file order
    flows: list


def _node_of(name):
    if name == "network":
        return -1
    m = re.fullmatch(r"node ([0-9]+)", name)
    return int(m.group(1)) if m else None


def read_trace(path):
    """trace.json (Chrome trace-event JSON) as a Trace."""
    doc = _load_json(path)
    other = _get(doc, "otherData", path, "object")
    where = f"{path}: otherData"
    _check_header(other, where)
    _check_keys(other, ("schema", "source", "config", "mode", "metadata"), where)
    _get(other, "mode", where, "string")

    nodes, threads, spans, flow_ends = {}, {}, [], {}
    raw_spans = []  # (pid, tid, where, t0_ns, t1_ns) per span; tracks are resolved once all are known
    for i, ev in enumerate(_get(doc, "traceEvents", path, "array")):
        w = f"{path}: traceEvents[{i}]"
        if not isinstance(ev, dict):
            raise TraceError(f"{w}: expected an object")
        ph = _get(ev, "ph", w, "string")
        pid, tid = _get(ev, "pid", w, "integer"), _get(ev, "tid", w, "integer")
        ts = _get(ev, "ts", w, "number")
        if pid < 1:
            raise TraceError(f"{w}: field 'pid': expected an integer >= 1, found {pid}")
        if ph == "M":
            name = _get(ev, "name", w, "string")
            args = _get(ev, "args", w, "object")
            aw = f"{w}: args"
            if name == "process_name":
                node = _node_of(_get(args, "name", aw, "string"))
                if node is None:
                    raise TraceError(f"{aw}: field 'name': expected \"node N\" or \"network\", found \"{args['name']}\"")
                if pid in nodes:
                    raise TraceError(f"{w}: a second process_name for pid {pid}")
                nodes[pid] = node
            elif name == "thread_name":
                kind = _get(args, "kind", aw, "string")
                if kind not in ("gpu", "link"):
                    raise TraceError(f"{aw}: field 'kind': expected \"gpu\" or \"link\", found \"{kind}\"")
                if tid in threads:
                    raise TraceError(f"{w}: a second thread_name for tid {tid}")
                threads[tid] = Track(tid, pid, _get(args, "name", aw, "string"), kind,
                                     _get(args, "index", aw, "integer"), _get(args, "lane", aw, "integer"), 0)
            elif name in ("process_sort_index", "thread_sort_index"):
                _get(args, "sort_index", aw, "integer")
            else:
                raise TraceError(f"{w}: field 'name': expected process_name, thread_name, "
                                 f"process_sort_index or thread_sort_index, found \"{name}\"")
            continue
        if tid < 1:
            raise TraceError(f"{w}: field 'tid': expected an integer >= 1, found {tid}")
        if ph == "X":
            cat = _get(ev, "cat", w, "string")
            if cat not in CATEGORIES:
                raise TraceError(f"{w}: field 'cat': expected one of {', '.join(CATEGORIES)}, found \"{cat}\"")
            dur = _get(ev, "dur", w, "number")
            if dur < 0:
                raise TraceError(f"{w}: field 'dur': expected microseconds >= 0, found {dur}")
            name = _get(ev, "name", w, "string")
            args = _get(ev, "args", w, "object")
            ints = {}
            for k, v in args.items():
                if k == "action":
                    if v != name:
                        raise TraceError(f"{w}: args: field 'action': expected the event's name, found {json.dumps(v)}")
                elif k in SPAN_ARGS:
                    ints[k] = _get(args, k, f"{w}: args", "integer")
                else:
                    raise TraceError(f"{w}: args: unknown field '{k}'")
            # Whole nanoseconds, as the C++ reader: a part that ends with its
            # transition then ends at exactly the same float.
            t0, t1 = round(ts * 1e3), round(ts * 1e3) + round(dur * 1e3)
            spans.append(Span(name, cat, None, t0 / 1e9, t1 / 1e9, ints))
            raw_spans.append((pid, tid, w, t0, t1))
        elif ph in ("s", "f"):
            flow_id = _get(ev, "id", w, "integer")
            last = raw_spans[-1] if raw_spans else None
            if not last or last[:2] != (pid, tid) or not last[3] <= round(ts * 1e3) <= last[4]:
                raise TraceError(f"{w}: flow event is not inside the X event before it "
                                 "(same pid and tid, ts within its span)")
            ends = flow_ends.setdefault(flow_id, {})
            if ph in ends:
                raise TraceError(f"{w}: flow id {flow_id} has a second {'start' if ph == 's' else 'end'}")
            ends[ph] = len(spans) - 1
        else:
            raise TraceError(f"{w}: field 'ph': expected one of X, M, s, f, found \"{ph}\"")

    for track in threads.values():
        if track.pid not in nodes:
            raise TraceError(f"{path}: thread tid {track.tid}: pid {track.pid} has no process_name metadata")
        track.node = nodes[track.pid]
    for span, (pid, tid, w, _, _) in zip(spans, raw_spans):
        track = threads.get(tid)
        if track is None:
            raise TraceError(f"{w}: tid {tid} has no thread_name metadata")
        if track.pid != pid:
            raise TraceError(f"{w}: tid {tid} belongs to pid {track.pid}, found pid {pid}")
        span.track = track
    flows = []
    for flow_id, ends in sorted(flow_ends.items()):
        if len(ends) != 2:
            raise TraceError(f"{path}: flow id {flow_id} " +
                             ("starts but never ends" if "s" in ends else "ends but never starts"))
        flows.append(Flow(flow_id, ends["s"], ends["f"]))
    return Trace(other["source"], other["config"], other["mode"], other["metadata"],
                 [threads[t] for t in sorted(threads)], spans, flows)


# ---- a run directory --------------------------------------------------------

class Run:
    """One run directory (elasticpipe simulate --out, or the executor's).

    summary.json and epochs.csv are read at once; chunks.csv and trace.json
    only when a figure asks for them, as a trace can be large.
    """

    def __init__(self, path):
        self.dir = path
        self.summary = read_summary(os.path.join(path, "summary.json"))
        self.epochs = read_epochs(os.path.join(path, "epochs.csv"))
        self._check()

    def _check(self):
        # The figures put the two files side by side; they must describe one run.
        csv_path = os.path.join(self.dir, "epochs.csv")
        for row in self.epochs:
            if row["source"] != self.source:
                raise TraceError(f"{csv_path}: source '{row['source']}', but summary.json says '{self.source}'")
            if row["mode"] not in self.modes:
                raise TraceError(f"{csv_path}: mode '{row['mode']}' is not in summary.json")
        for m in self.summary["modes"]:
            n = len(self.epochs_of(m["mode"]))
            if n != len(m["epoch_s"]):
                raise TraceError(f"{csv_path}: mode '{m['mode']}' has {n} rows, "
                                 f"summary.json has {len(m['epoch_s'])} epochs")

    @functools.cached_property
    def chunks(self):
        return read_chunks(os.path.join(self.dir, "chunks.csv"))

    @functools.cached_property
    def trace(self):
        return read_trace(os.path.join(self.dir, "trace.json"))

    @property
    def source(self):
        return self.summary["source"]

    @property
    def metadata(self):
        return self.summary["metadata"]

    @property
    def label(self):
        """The config's name: configs/paper/vit_imagenet.toml -> vit_imagenet."""
        return os.path.splitext(os.path.basename(self.summary["config"]))[0] or self.dir

    @property
    def title(self):
        """The label with the model, data and source, for figure titles."""
        details = [self.metadata[k] for k in ("model", "data") if k in self.metadata]
        return f"{self.label} ({', '.join(details + [self.source])})"

    @property
    def name(self):
        """The run's folder name: what tells apart runs of one config."""
        return os.path.basename(os.path.abspath(self.dir))

    @property
    def modes(self):
        return [m["mode"] for m in self.summary["modes"]]

    @property
    def main_mode(self):
        """The full method: autocache when simulated, else the last mode (the executor's train)."""
        return "autocache" if "autocache" in self.modes else self.modes[-1]

    @property
    def reference(self):
        """The mode the summary's speedups are over (None: no speedups)."""
        return self.summary["reference"]

    @property
    def alpha(self):
        if "alpha" not in self.metadata:
            raise TraceError(f"{self.dir}/summary.json: metadata has no 'alpha'")
        try:
            return float(self.metadata["alpha"])
        except ValueError:
            raise TraceError(f"{self.dir}/summary.json: metadata 'alpha': expected a number, "
                             f"found '{self.metadata['alpha']}'") from None

    def mode(self, name):
        """The summary entry of a mode; ValueError when the run lacks it."""
        for m in self.summary["modes"]:
            if m["mode"] == name:
                return m
        raise ValueError(f"{self.dir}/summary.json: no mode '{name}' (modes: {', '.join(self.modes)})")

    def epochs_of(self, mode):
        return sorted((r for r in self.epochs if r["mode"] == mode), key=lambda r: r["epoch"])

    def only_mode(self):
        """The summary entry of a run of one mode, as elasticpipe train writes;
        TraceError for a run of several (a simulation of every mode)."""
        if len(self.modes) != 1:
            found = f"{len(self.modes)} modes" + (f" ({', '.join(self.modes)})" if self.modes else "")
            raise TraceError(f"{self.dir}/summary.json: {found}; expected one mode (a run of elasticpipe train)")
        return self.summary["modes"][0]


# What two runs must share for their times and accuracies to be compared:
# the same model, data and training length on the same cluster (summary.json
# metadata, written alike by the simulator and the executor).
COMPARABLE = ("model", "workload", "data", "num_train_samples", "epochs", "batch_size", "cluster")


def check_comparable(runs):
    """TraceError naming the first run that differs from runs[0] in its source
    or in a COMPARABLE metadata field."""
    first = runs[0]
    where = f"{first.dir}/summary.json"
    for run in runs[1:]:
        if run.source != first.source:
            raise TraceError(f"{run.dir}/summary.json: source '{run.source}', but {where} has '{first.source}'; "
                             "expected runs of one kind (all trained or all simulated)")
        for key in COMPARABLE:
            a, b = first.metadata.get(key), run.metadata.get(key)
            if a != b:
                show = lambda v: "none" if v is None else json.dumps(v, ensure_ascii=False)
                raise TraceError(f"{run.dir}/summary.json: metadata '{key}' is {show(b)}, but {where} has {show(a)}; "
                                 "expected runs of the same model, data, training length and cluster")


def measured_speedup(base, method):
    """base's total time over method's, both runs of one mode."""
    t = method.only_mode()["total_s"]
    if t <= 0:
        raise TraceError(f"{method.dir}/summary.json: modes[0]: total_s {t}: expected a time > 0")
    return base.only_mode()["total_s"] / t


def load_run(path):
    if not os.path.isdir(path):
        raise OSError(2, "not a run directory", path)
    return Run(path)
