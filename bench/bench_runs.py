"""What the benches that drive elasticpipe share: one-line refusals, runs
in their own process group with a log each (ended with the bench when it
is stopped), a scratch folder in memory, elasticpipe `train` runs whose
outputs are kept, config overrides on a command line, and the tiny CPU
model of --smoke. Used by
bench/gpu_vs_pytorch.py, bench/sim_vs_measured.py and bench/where_it_pays.py."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A model small enough for a CPU: proves the runs, the parsing and the
# tables in seconds (the numbers mean nothing).
SMOKE_SETS = [
    "model.hidden_size=32", "model.intermediate_size=64", "model.num_attention_heads=2",
    "model.image_size=32", "model.patch_size=8", "model.num_labels=10",
    "data.num_train_samples=256", "data.num_test_samples=32", "training.batch_size=32",
    'exec.device="cpu"',
]


def fail(msg):
    print("ERROR: " + msg, file=sys.stderr)
    sys.exit(2)


class Stopped(BaseException):
    """SIGTERM, SIGINT or SIGHUP reached the bench: raised where it was, so
    that the run going is ended on the way out (Runner.run) and the bench
    exits 128 + the signal."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def on_stop_signal(signum, frame):
    for s in STOP_SIGNALS:  # a second signal must not cut the cleanup short
        signal.signal(s, signal.SIG_IGN)
    raise Stopped(signum)


def run_main(main):
    """main() with the stop signals raising Stopped; exits 128 + the signal."""
    for s in STOP_SIGNALS:
        if signal.getsignal(s) != signal.SIG_IGN:  # nohup stays nohup
            signal.signal(s, on_stop_signal)
    try:
        main()
    except Stopped as e:
        print(f"stopped by {signal.Signals(e.signum).name}", file=sys.stderr)
        sys.exit(128 + e.signum)


def end_group(p, grace=5.0):
    """Ends p's process group (p and what it started): SIGTERM (train then
    removes its cache files), SIGKILL for what is left after `grace` s; returns
    once p is reaped and the group is gone (or after a few more seconds)."""
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            p.poll()
            try:
                os.killpg(p.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def with_sets(cmd, sets):
    """`cmd` with a `--set` for each of `sets`, in order (a later one wins)."""
    return list(cmd) + [x for s in sets for x in ("--set", s)]


def check_binary(path):
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        fail(f"--bin {path}: not an executable (the elasticpipe binary)")


class Runner:
    """Runs commands with a log each under OUT/logs/, and elasticpipe train
    runs in a scratch folder whose named outputs are kept under OUT/runs/."""

    def __init__(self, out):
        self.out = Path(out)
        (self.out / "logs").mkdir(parents=True, exist_ok=True)
        # Each train run checkpoints every epoch (weights and optimizer state:
        # about 1 GB for ViT-B/16): written to memory when /dev/shm has room.
        shm = Path("/dev/shm")
        use_shm = shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 8 << 30
        self.scratch = Path(tempfile.mkdtemp(prefix="ep-bench.", dir=shm if use_shm else None))

    def close(self):
        shutil.rmtree(self.scratch, ignore_errors=True)

    def run(self, name, cmd, timeout=None, must_pass=True):
        """(output, wall s); output None where the run failed and need not pass."""
        log = self.out / "logs" / f"{name}.log"
        t0 = time.perf_counter()
        # Its own process group, so that a timeout also ends what it started
        # (torch.compile's worker processes); and so that a terminal's Ctrl-C
        # reaches the bench alone, which ends the group itself (below).
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            try:
                text, _ = p.communicate(timeout=timeout)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                end_group(p)
                text, _ = p.communicate()
                text += f"\n(timed out after {timeout} s)"
                rc = None
        finally:
            # The bench stopped (a signal: Stopped) or failed while the run was
            # going: in its own session it would outlive the bench and keep
            # the GPU busy under whatever the caller measures next.
            if p.returncode is None:
                end_group(p)
        log.write_text(" ".join(map(str, cmd)) + "\n" + text)
        wall = time.perf_counter() - t0
        print(f"  {name}: {wall:.1f} s", file=sys.stderr, flush=True)
        if rc != 0 and must_pass:
            print(text[-3000:], file=sys.stderr)
            fail(f"{name} failed ({'timeout' if rc is None else f'exit code {rc}'}); log: {log}")
        return text if rc == 0 else None, wall

    def train(self, name, binary, config, sets, keep):
        """elasticpipe train CONFIG --set ...; the files named in `keep` that
        it wrote are copied to OUT/runs/NAME (returned), the rest removed."""
        scratch = self.scratch / name
        self.run(name, with_sets([binary, "train", config, "--out", str(scratch)], sets))
        kept = self.out / "runs" / name
        kept.mkdir(parents=True, exist_ok=True)
        for f in keep:
            if (scratch / f).exists():
                shutil.copy(scratch / f, kept / f)
        shutil.rmtree(scratch, ignore_errors=True)
        return kept
