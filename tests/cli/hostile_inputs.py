"""Hostile inputs beyond config mutations, for fuzz_configs.py: special files,
links and directories in place of every file the tool reads, nesting without
end, a full disk, parser errors, empty and repeated arguments, 64-bit counts,
values every command must treat alike.

Each case must end with exit 0, or exit 2 and one `ERROR:` line holding what
it expects (the path, key or argument), printable on one line; within a few
seconds and a memory bound (a special file read to the end grows until it is
killed); leaving no new file in the working folder (the case runs there, so a
default output folder is seen too) beyond the outputs it expects.
"""
import json
import os
import resource
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time

# The most a refusal may take: the commands without LibTorch start in a few
# MB; those with it (train, validate) map and touch the LibTorch build's
# libraries first (~200 MB for Debian's 1.13, ~500 MB for a CUDA torch 2.x),
# measured once per run as the baseline this margin is added to.
MAX_RSS_MB = 100
EXEC_MARGIN_MB = 200
# SimGrid's log lines ("[0.000000] [surf_network/WARNING] ..."): never ours.
RAW_LOG = re.compile(r"\[[\w.]+/(WARNING|CRITICAL|ERROR|INFO|VERBOSE|DEBUG)\]")


class Case:
    def __init__(self, name, argv, expect=None, exec_=False, outputs=(), check=None, limit_s=None, fsize_kb=None,
                 env=None):
        self.name, self.argv, self.expect = name, argv, expect  # expect None: exit 0
        self.exec_, self.outputs, self.check = exec_, outputs, check
        self.env = env  # variables set for the run, beside the inherited ones
        # A refusal takes well under a second on a quiet machine; the limits
        # leave room for a loaded CI runner (LibTorch alone takes 1-2 s to load).
        self.limit_s = limit_s or (30.0 if exec_ else 10.0)
        self.fsize_kb = fsize_kb


def files_under(root):
    out = set()
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            out.add(os.path.relpath(os.path.join(d, n), root))
    return out


def run_measured(argv, cwd, limit_s, fsize_kb=None, env=None):
    """(exit code or -signal or None on timeout, output, max RSS in MB) of one run."""
    def limits():
        os.setsid()
        if fsize_kb is not None:  # a disk that fills: writes beyond fail (EFBIG), as ENOSPC would
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_kb * 1024, resource.RLIM_INFINITY))
    with tempfile.TemporaryFile() as out:
        t0 = time.monotonic()
        p = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             preexec_fn=limits, env=dict(os.environ, **env) if env else None)
        rc, usage = None, None
        while time.monotonic() - t0 < limit_s:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.005)
        if rc is None:
            os.killpg(p.pid, signal.SIGKILL)
            _, _, usage = os.wait4(p.pid, 0)
        p.returncode = rc if rc is not None else -9  # reaped: keep Popen from waiting again
        out.seek(0)
        text = out.read().decode("utf-8", errors="replace")
    return rc, text, usage.ru_maxrss / 1024


def judge(case, rc, output, rss_mb, new_files, slowdown, exec_baseline_mb=0.0):
    """None when the case behaved, else why not."""
    if rc is None:
        return f"still running after {case.limit_s * slowdown} s"
    if rc < 0:
        return f"killed by signal {-rc}"
    bound = round((exec_baseline_mb + EXEC_MARGIN_MB if case.exec_ else MAX_RSS_MB) * slowdown)
    if rss_mb > bound:
        return f"{rss_mb:.0f} MB of memory, expected at most {bound}"
    errors = [line for line in output.splitlines() if line.startswith("ERROR:")]
    if case.expect is None:
        if rc != 0:
            return f"exit {rc}, expected 0"
    else:
        if rc != 2:
            return f"exit {rc}, expected 2"
        if len(errors) != 1:
            return f"{len(errors)} ERROR lines, expected 1"
        if case.expect not in errors[0]:
            return f"the ERROR line does not hold {case.expect!r}"
    if any(not ch.isprintable() for line in errors for ch in line) or "\ufffd" in "".join(errors):
        return "the ERROR line holds unprintable bytes"
    if RAW_LOG.search(output):
        return "a library's own log line reached the output"
    left = sorted(f for f in new_files if not any(f == o or f.startswith(o + "/") for o in case.outputs))
    if left:
        return f"left behind: {', '.join(left[:5])}"
    if case.check:
        return case.check()
    return None


def build_files(w):
    """The hostile files the cases read, in folder w."""
    def write(name, data, mode="w"):
        with open(os.path.join(w, name), mode) as f:
            f.write(data)
        return os.path.join(w, name)
    write("deep.json", "[" * 200000 + "]" * 200000)
    write("deep.toml", "a = " + "[" * 100000 + "]" * 100000 + "\n")
    os.mkfifo(os.path.join(w, "fifo"))
    os.symlink("/dev/zero", os.path.join(w, "zero-link"))
    os.mkdir(os.path.join(w, "dir"))
    with open(os.path.join(w, "big.toml"), "wb") as f:  # sparse: 2 MB of nothing
        f.truncate(2 << 20)
    write("memo.json", '{"entries": [1]}')
    write("trace-a.json", '{"traceEvents": []}')
    for name, hidden in (("trace-wide.json", 512), ("trace-narrow.json", 64)):  # one model, two sizes
        meta = {"model": "vit L=4", "batch_size": 64,
                "workload": f"hidden {hidden}, intermediate {4 * hidden}, heads 8, tokens 65, fp32"}
        write(name, json.dumps({"displayTimeUnit": "ms", "otherData": {
            "schema": "elasticpipe.trace/3", "source": "sim", "config": "x.toml", "mode": "configured",
            "metadata": meta}, "traceEvents": []}))
    write("garbage.csv", b"step,layer,grad_norm\n\x01\xff\r\x1b[2J,0,1\n", "wb")
    os.makedirs(os.path.join(w, "ckpt-zero"))
    os.symlink("/dev/zero", os.path.join(w, "ckpt-zero", "latest"))
    os.makedirs(os.path.join(w, "ckpt-dir", "step-0000000001", "state.bin"))
    write(os.path.join("ckpt-dir", "latest"), "step-0000000001\n")
    # Fashion-MNIST whose training images claim 0xFFFFFFFF images.
    fm = os.path.join(w, "fmnist")
    os.mkdir(fm)
    for split, n in (("train", 0xFFFFFFFF), ("t10k", 10)):
        write(os.path.join("fmnist", f"{split}-images-idx3-ubyte"),
              bytes([0, 0, 8, 3]) + n.to_bytes(4, "big") + bytes([0, 0, 0, 28, 0, 0, 0, 28]), "wb")
        write(os.path.join("fmnist", f"{split}-labels-idx1-ubyte"), bytes([0, 0, 8, 1, 0, 0, 0, 10]) + bytes(10), "wb")


HF_CLUSTER = '[cluster]\npreset = "paper"\nnodes = 1\ngpus_per_node = 1\n'


def hf_files(w):
    """A tiny BERT checkpoint (Hugging Face's layout, zero weights) whose
    safetensors file is cut or lies, one of another family, a prepared data
    set with a label outside its classes, and configs to train on them."""
    H, I, V, P = 8, 16, 32, 8
    names = [("embeddings.word_embeddings.weight", [V, H]), ("embeddings.position_embeddings.weight", [P, H]),
             ("embeddings.token_type_embeddings.weight", [2, H]), ("embeddings.LayerNorm.weight", [H]),
             ("embeddings.LayerNorm.bias", [H])]
    for part, shape in (("attention.self.query", [H, H]), ("attention.self.key", [H, H]),
                        ("attention.self.value", [H, H]), ("attention.output.dense", [H, H]),
                        ("attention.output.LayerNorm", None), ("intermediate.dense", [I, H]),
                        ("output.dense", [H, I]), ("output.LayerNorm", None)):
        names += [(f"encoder.layer.0.{part}.weight", shape or [H]), (f"encoder.layer.0.{part}.bias", [(shape or [H])[0]])]
    names = [("bert." + n, s) for n, s in names + [("pooler.dense.weight", [H, H]), ("pooler.dense.bias", [H])]]
    names += [("classifier.weight", [2, H]), ("classifier.bias", [2])]
    header, at = {}, 0
    for n, shape in names:
        size = 4 * (shape[0] * (shape[1] if len(shape) > 1 else 1))
        header[n] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + size]}
        at += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    whole = len(text).to_bytes(8, "little") + text + bytes(at)
    config = {"architectures": ["BertForSequenceClassification"], "model_type": "bert", "hidden_size": H,
              "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": I, "vocab_size": V,
              "max_position_embeddings": P, "id2label": {"0": "a", "1": "b"}}
    for name, data, cfg in (("hf-cut", whole[:20], config), ("hf-lies", whole[:-4], config),
                            ("hf-roberta", whole, dict(config, model_type="roberta")), ("hf-ok", whole, config)):
        os.mkdir(os.path.join(w, name))
        with open(os.path.join(w, name, "model.safetensors"), "wb") as f:
            f.write(data)
        with open(os.path.join(w, name, "config.json"), "w") as f:
            json.dump(cfg, f)
    # A prepared token set (exec/prepared_data.hpp) of 4 samples, one labelled 7.
    os.mkdir(os.path.join(w, "epdata"))
    for split in ("train", "test"):
        labels, names_b = struct.pack("<4i", 0, 1, 7, 0), b"a\nb\n"
        lengths, ids = struct.pack("<4i", *[P] * 4), bytes(4 * 4 * P)
        header = struct.pack("<8sIIQIIIIQQQQQQQ32x", b"EPDATA01", 2, 2, 4, P, 0, 0, 0, 128, 192, 320, 0, 256,
                             len(names_b), 320 + len(ids))
        with open(os.path.join(w, "epdata", split + ".epdata"), "wb") as f:
            f.write(header + labels + bytes(48) + lengths + bytes(48) + names_b + bytes(60) + ids)
    for name, data in (("hf", 'name = "synthetic-tokens"\n'),
                       ("hf-data", f'name = "prepared"\npath = "{os.path.join(w, "epdata")}"\n')):
        with open(os.path.join(w, name + ".toml"), "w") as f:
            f.write(HF_CLUSTER + f'[model]\ncheckpoint = "{os.path.join(w, "hf-ok")}"\nseq_length = {P}\n'
                    f'[data]\n{data}num_train_samples = 4\nnum_test_samples = 4\n[training]\nepochs = 1\n'
                    'batch_size = 4\noptimizer = "sgd"\nlr = 0.1\nseed = 1\n[planner]\nchunk_search = false\nM = 1\n')


def cases(bin_, root, w):
    bert = os.path.join(root, "configs", "small", "tiny_bert_synthetic.toml")
    vit = os.path.join(root, "configs", "small", "tiny_vit_fmnist.toml")
    fm = os.path.join(root, "configs", "fashion_mnist_vit_tiny.toml")  # its plan times a chunk search
    dp = os.path.join(root, "tests", "cli", "configs", "dp_tiny.toml")
    p = lambda name: os.path.join(w, name)  # noqa: E731
    # One process trains one pipeline: no data-parallel replicas.
    small = ["--set", "data.num_train_samples=64", "--set", "data.num_test_samples=16", "--set", "training.epochs=1",
             "--set", "planner.autodp=false"]
    replay = ["--set", "planner.freeze_policy=replay", "--set"]
    c = [
        # Special files, links and directories where a file is read.
        Case("plan /dev/zero", [bin_, "plan", "/dev/zero"], "/dev/zero: a character device"),
        Case("plan a FIFO", [bin_, "plan", p("fifo")], p("fifo") + ": a FIFO"),
        Case("plan a directory", [bin_, "plan", p("dir")], p("dir") + ": a directory"),
        Case("plan a link to /dev/zero", [bin_, "plan", p("zero-link")], "a symbolic link to a character device"),
        Case("plan a config over 1 MB", [bin_, "plan", p("big.toml")], "2097152 bytes, expected the config of at most"),
        Case("plan a config nested 100,000 deep", [bin_, "plan", p("deep.toml")], p("deep.toml") + ":"),
        Case("simulate /dev/urandom", [bin_, "simulate", "/dev/urandom"], "/dev/urandom: a character device"),
        Case("schedule /dev/zero", [bin_, "schedule", "/dev/zero", "--K", "2", "--M", "2"], "/dev/zero"),
        Case("simulate --profile /dev/zero", [bin_, "simulate", bert, "--profile", "/dev/zero"], "/dev/zero"),
        Case("simulate --profile nested 200,000 deep", [bin_, "simulate", bert, "--profile", p("deep.json")],
             p("deep.json") + ": JSON nested deeper"),
        # Refused before LibTorch loads: elasticpipe checks what it hands over.
        Case("validate --profile nested 200,000 deep", [bin_, "validate", bert, "--profile", p("deep.json")],
             p("deep.json") + ": JSON nested deeper"),
        Case("train with a bad config value", [bin_, "train", bert, "--set", "planner.alpha=7"],
             "key 'planner.alpha': expected a number in (0, 1), found 7"),
        Case("profile with a config over 1 MB", [bin_, "profile", p("big.toml")], "expected the config of at most"),
        Case("trace diff nested 200,000 deep", [bin_, "trace", "diff", p("deep.json"), p("deep.json")],
             "nested deeper"),
        Case("trace diff /dev/zero", [bin_, "trace", "diff", "/dev/zero", "/dev/zero"], "/dev/zero"),
        Case("replay file /dev/zero", [bin_, "plan", bert] + replay + ["planner.replay_grad_norms_file=/dev/zero"],
             "/dev/zero: a character device"),
        Case("a garbage replay file, shown escaped", [bin_, "plan", bert] + replay + [
            "planner.replay_grad_norms_file=" + p("garbage.csv")], p("garbage.csv") + ":2: "),
        Case("train --resume: latest a link to /dev/zero", [bin_, "train", bert, "--out", p("t1"), "--resume",
             p("ckpt-zero")] + small, p("ckpt-zero") + "/latest: a symbolic link to a character device", exec_=True),
        Case("train --resume: state.bin a directory", [bin_, "train", bert, "--out", p("t2"), "--resume",
             p("ckpt-dir")] + small, "state.bin: a directory", exec_=True),
        Case("train on an IDX file of 0xFFFFFFFF images", [bin_, "train", vit, "--out", p("t3"), "--set",
             f'data.path="{p("fmnist")}"'] + small, "found 4294967295", exec_=True),
        Case("train with a damaged chunk memo", [bin_, "train", fm, "--out", p("t6"), "--set",
             f'exec.chunk_memo="{p("memo.json")}"'] + small,
             "chunk memo " + p("memo.json") + ": entries[0]: expected an object, found 1; delete it", exec_=True),
        Case("train with the chunk memo a link to /dev/zero", [bin_, "train", fm, "--out", p("t7"), "--set",
             f'exec.chunk_memo="{p("zero-link")}"'] + small, "a symbolic link to a character device", exec_=True),
        Case("train with the chunk memo under a file", [bin_, "train", fm, "--out", p("t8"), "--set",
             f'exec.chunk_memo="{p("memo.json")}/memo.json"'] + small,
             "exec.chunk_memo " + p("memo.json") + ": cannot create the output folder: Not a directory", exec_=True),
        # A full disk while checkpointing: the error names the file, and no
        # temporary file stays (the epoch's CSV, written before, does).
        Case("train with a disk full at the checkpoint", [bin_, "train", bert, "--out", p("t4")] + small,
             "step-0000000002/state.bin: write failed", exec_=True, fsize_kb=64, outputs=("t4",),
             check=lambda: no_temporary(p("t4")) or (
                 "a checkpoints folder left" if os.path.exists(p("t4/checkpoints")) else None)),
        # Parser errors, empty and repeated arguments: one line each.
        Case("no command", [bin_], "expected a command, one of plan|schedule|simulate"),
        Case("trace without diff", [bin_, "trace"], "trace: expected a command, one of diff"),
        Case("an unknown flag", [bin_, "plan", bert, "--nosuch"], "--nosuch"),
        Case("a missing config", [bin_, "plan", p("none.toml")], p("none.toml") + ": cannot open the config"),
        Case("--K abc", [bin_, "schedule", "--K", "abc", "--M", "2"],
             "--K: expected an integer in [1, 1024], found 'abc'"),
        Case("--jobs 0", [bin_, "sweep", bert, "--jobs", "0"], "--jobs: expected an integer in [1, 256], found '0'"),
        Case("--nproc 0", [bin_, "train", bert, "--nproc", "0"], "--nproc: expected an integer in [1, 256]"),
        Case("--out ''", [bin_, "simulate", bert, "--out", ""], "--out: expected an output folder, found ''"),
        Case("--out twice", [bin_, "simulate", bert, "--out", p("o1"), "--out", p("o2")], "--out"),
        Case("--profile ''", [bin_, "simulate", bert, "--profile", ""], "--profile: expected a profile file"),
        Case("--kind ''", [bin_, "schedule", "--K", "2", "--M", "2", "--kind", ""], "--kind: expected gpipe"),
        Case("schedule ''", [bin_, "schedule", "", "--K", "2", "--M", "2"], "an empty path given for the config"),
        Case("--resume ''", [bin_, "train", bert, "--resume", ""], "--resume: expected a checkpoint directory"),
        Case("a key set twice", [bin_, "plan", bert, "--set", "planner.alpha=0.2", "--set", "planner.alpha=0.3"],
             "--set planner.alpha: given twice"),
        Case("a key swept twice", [bin_, "sweep", bert, "--set", "planner.alpha=0.2", "--set", "planner.alpha=0.3"],
             "--set planner.alpha: given twice"),
        # Counts beyond 32 bits, --exact included.
        Case("--exact with 2^38 samples", [bin_, "simulate", bert, "--mode", "baseline", "--exact", "--out", p("e1"),
             "--set", "data.num_train_samples=274877907264", "--set", "training.epochs=1"], "--exact: "),
        Case("--exact with 2e11 samples", [bin_, "simulate", bert, "--mode", "baseline", "--exact", "--out", p("e2"),
             "--set", "data.num_train_samples=200000000000", "--set", "training.epochs=1"], "--exact: "),
        Case("--exact within its bound", [bin_, "simulate", bert, "--mode", "baseline", "--exact", "--out", p("e3"),
             "--set", "data.num_train_samples=2048", "--set", "training.epochs=1"], outputs=("e3",)),
        Case("a trillion samples, simulated and traced", [bin_, "simulate", bert, "--out", p("e4"), "--set",
             "data.num_train_samples=1000000000000", "--set", "training.epochs=6"], outputs=("e4",),
             check=lambda: None if "untraced" in open(p("e4/summary.json")).read() else "no untraced note"),
        # What train refuses, plan and simulate refuse too.
        Case("plan: a class the labels cannot hold", [bin_, "plan", vit, "--set", "data.classes=[10]", "--set",
             "model.num_labels=1"], "key 'data.classes'"),
        Case("simulate: two classes, ten labels", [bin_, "simulate", vit, "--set", "data.classes=[1,2]"],
             "key 'model.num_labels'"),
        Case("train: augmentation beside a cache that would go stale", [bin_, "train", vit, "--out", p("a1"), "--set",
             'data.augment=["hflip"]', "--set", 'planner.cache="on"'], "key 'planner.cache'", exec_=True),
        Case("simulate: augmentation of token sequences", [bin_, "simulate", bert, "--set", 'data.augment=["crop"]'],
             "key 'data.augment'"),
        Case("a sweep of lists", [bin_, "sweep", vit, "--set", "data.classes=[1,2],[3,4]", "--set",
                                  "model.num_labels=2", "--set", "data.num_train_samples=256", "--set",
                                  "data.num_test_samples=64", "--mode", "baseline", "--out", p("s1")], outputs=("s1",),
             check=lambda: None if '"[1,2]"' in open(p("s1/sweep.csv")).read() else "sweep.csv lacks the quoted list"),
        Case("a latency of 1e-300 s", [bin_, "simulate", bert, "--mode", "baseline", "--out", p("l1"), "--set",
             "cluster.intra_node.latency_s=1e-300"], "key 'cluster.intra_node.latency_s'"),
        Case("an efficiency of 1e-300", [bin_, "plan", bert, "--set", "cluster.device.efficiency=1e-300"],
             "key 'cluster.device.efficiency'"),
        # An output that is one of the command's inputs is refused before it is written.
        Case("trace diff --csv onto its own input", [bin_, "trace", "diff", p("trace-a.json"), p("trace-a.json"),
                                                     "--csv", p("trace-a.json")],
             "--csv " + p("trace-a.json") + ": this is the input",
             check=lambda: None if open(p("trace-a.json")).read() == '{"traceEvents": []}' else "the input changed"),
        Case("profile --out onto its config", [bin_, "profile", p("own.toml"), "--out", p("own.toml")],
             "--out " + p("own.toml") + ": this is the input", exec_=True,
             check=lambda: None if open(p("own.toml")).read() == open(bert).read() else "the config changed"),
        Case("more threads per worker than cores", [bin_, "train", bert, "--out", p("t9"), "--set",
                                                    "exec.threads_per_worker=4096"] + small,
             "key 'exec.threads_per_worker': expected at most this machine's", exec_=True),
        Case("10,000 freeze steps", [bin_, "simulate", vit, "--set", "training.epochs=10000", "--set",
                                     "training.batch_size=4"],
             "key 'planner.freeze_interval_epochs': expected at most 1000 freeze steps"),
        Case("1,000 freeze steps, simulated", [bin_, "simulate", bert, "--mode", "baseline", "--out", p("fs1"), "--set",
                                              "training.epochs=1000", "--set", "data.num_train_samples=64"],
             outputs=("fs1",), limit_s=60),
        Case("no test samples", [bin_, "plan", bert, "--set", "data.num_test_samples=0"],
             "key 'data.num_test_samples': expected an integer >= 1, found 0"),
        Case("OMP_NUM_THREADS=0", [bin_, "train", bert, "--out", p("t10")] + small,
             "environment variable OMP_NUM_THREADS: expected a positive number of threads", exec_=True,
             env={"OMP_NUM_THREADS": "0"}),
        Case("a trace diff of two workloads", [bin_, "trace", "diff", p("trace-wide.json"), p("trace-narrow.json")],
             "different workloads: workload 'hidden 512"),
        Case("a misspelled key gets the key meant", [bin_, "plan", bert, "--set", "planner.alfa=0.3"],
             "unknown key (did you mean planner.alpha?)"),
    ]
    # Hugging Face checkpoints and prepared data: one line naming the file and the tensor or sample.
    hf = p("hf.toml")
    c += [
        Case("train from a safetensors file cut in its header", [bin_, "train", hf, "--out", p("h1"), "--set",
             f'model.checkpoint="{p("hf-cut")}"'], p("hf-cut") + "/model.safetensors: header length: expected",
             exec_=True),
        Case("train from a safetensors header that lies", [bin_, "train", hf, "--out", p("h2"), "--set",
             f'model.checkpoint="{p("hf-lies")}"'],
             "model.safetensors: tensor 'classifier.bias': expected data_offsets within", exec_=True),
        Case("plan a checkpoint of another family", [bin_, "plan", hf, "--set", f'model.checkpoint="{p("hf-roberta")}"'],
             p("hf-roberta") + "/config.json: key 'model_type': expected \"bert\" or \"vit\""),
        Case("train on prepared data with a label outside the classes", [bin_, "train", p("hf-data.toml"), "--out",
             p("h3")], "train.epdata: sample 2 label: expected a class in [0, 2), found 7", exec_=True),
    ]
    # One error, one line, whichever process meets it.
    c.append(Case("train --nproc 4 resuming a link to /dev/zero", [bin_, "train", dp, "--nproc", "4", "--out", p("t5"),
                  "--resume", p("ckpt-zero")] + small, "latest: a symbolic link", exec_=True, limit_s=60))
    return c


def no_temporary(out):
    left = [f for f in files_under(out) if ".tmp" in f]
    return f"temporary files left: {left}" if left else None


def mount_tmpfs(mnt):
    """A 64 kB tmpfs at mnt, where this user may mount one; False otherwise."""
    os.mkdir(mnt)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt], capture_output=True).returncode == 0:
        return True
    os.rmdir(mnt)
    return False


def full_disk_cases(bin_, root, w):
    """A real full disk under simulate's outputs and train's checkpoints."""
    bert = os.path.join(root, "configs", "small", "tiny_bert_synthetic.toml")
    sim, ckpt = os.path.join(w, "tiny"), os.path.join(w, "tiny-train")
    return [
        Case("simulate onto a full tmpfs", [bin_, "simulate", bert, "--mode", "baseline", "--out",
             os.path.join(sim, "run"), "--set", "data.num_train_samples=1024"], "No space left on device",
             check=lambda: no_temporary(sim)),
        Case("train onto a full tmpfs", [bin_, "train", bert, "--out", ckpt, "--set", "data.num_train_samples=64",
             "--set", "data.num_test_samples=16", "--set", "training.epochs=1", "--set", "planner.autodp=false"],
             "No space left on device",
             exec_=True, outputs=("tiny-train",), check=lambda: no_temporary(ckpt)),
    ], (sim, ckpt)


def run_hostile(bin_, root, keep=None, slowdown=1.0):
    """Runs every case; returns (failures, number run, notes). `slowdown`
    scales the time and memory bounds (the sanitizer build's shadow memory
    and checks)."""
    root = os.path.abspath(root)
    w = keep or tempfile.mkdtemp(prefix="ep_hostile_")
    os.makedirs(w, exist_ok=True)
    build_files(w)
    hf_files(w)
    shutil.copy(os.path.join(root, "configs", "small", "tiny_bert_synthetic.toml"), os.path.join(w, "own.toml"))
    has_exec = os.access(os.path.join(os.path.dirname(bin_), "elasticpipe-exec"), os.X_OK)
    notes = [] if has_exec else ["skipped train and validate: no elasticpipe-exec beside " + bin_]
    todo = cases(bin_, root, w)
    tmpfs, mounts = full_disk_cases(bin_, root, w)
    mounted = [m for m in mounts if mount_tmpfs(m)]
    if len(mounted) == len(mounts):
        todo += tmpfs
    else:
        notes.append("skipped the full tmpfs cases: cannot mount a tmpfs here (not root); a file size limit stands in")
    todo = [c for c in todo if has_exec or not c.exec_]
    failures = []
    # What elasticpipe-exec itself takes to refuse a config that does not
    # exist: LibTorch loaded, nothing read (elasticpipe would refuse it first).
    exec_bin = os.path.join(os.path.dirname(bin_), "elasticpipe-exec")
    exec_baseline = run_measured([exec_bin, "train", os.path.join(w, "no-such.toml")], w, 60)[2] if has_exec else 0.0
    try:
        for case in todo:
            before = files_under(w)
            rc, output, rss = run_measured(case.argv, w, case.limit_s * slowdown, case.fsize_kb, case.env)
            new = files_under(w) - before
            why = judge(case, rc, output, rss, new, slowdown, exec_baseline)
            if why:
                failures.append(f"{case.name}: {why}\n    command: {' '.join(case.argv[1:])}\n"
                                f"    output: {output.strip()[-600:]}")
    finally:
        for m in mounted:
            subprocess.run(["umount", m], capture_output=True)
        if not keep and not failures:
            shutil.rmtree(w, ignore_errors=True)
    if failures:
        notes.append(f"the hostile cases' folder is kept in {w}")
    return failures, len(todo), notes
