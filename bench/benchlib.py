"""Shared pieces of the benchmark suite (bench/run.sh -> bench/suite.py, bench/experiments/) and of the
standalone tools in bench/: the memory cap (a cgroup v1 memory controller child group), dropping the page
cache, running one `zipmoe` command under the cap with its peak memory recorded, a server started and stopped
under it, reading the machine description, byte-comparing logits files; the constants the experiments share
(prompt indices, synthetic model settings); and the report's formatters and figure backend.

Nothing here times anything by itself; the experiments decide what runs.
"""
import contextlib
import glob
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

CGROUP_V1_ROOT = "/sys/fs/cgroup/memory"
MIB = 1 << 20
GIB = 1 << 30

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
# Real prompts (bench/data/README.md): every generation's prompt comes from ShareGPT. Sequence i of a batch of N
# is prompt prompt_index + i (the suite's cfg: quick #3 "Suggest subchapters for chapter 5", 33 characters, so a
# cold prefill reads part of the model rather than all of it; full #0, 70 characters); the planner's workload
# profile is single-prompt runs on other prompts from PLAN_INDEX (ZipMoE §3.4: popularity from a calibration
# workload, not the measured one).
PROMPTS_FILE = os.path.join(BENCH_DIR, "data", "sharegpt-first-turn-500.json")
PLAN_INDEX = 100
LOAD_INDEX = 200      # (l), (h), (q): the HTTP load tests' requests start here
RESIDUAL_INDEX = 300  # DALI residual calibration (`zipmoe profile --prefetch-residuals`): prompts from here
# Prefetching systems (--prefetch, ExpertProvider::Prefetch): "<policy>+<predictor>".
PREFETCHERS = ("top-score", "residual")
EMBEDDING_STD = 1.0  # docs/synth.md "Embedding scale": keeps decode-time routing token-dependent
ROUTER_SKEW = 0.5  # docs/synth.md: X = 0.25-0.5 gives the 20-30 % top-10 % shares of trained MoE models
TRAINED = "qwen2moe-debian-18m"  # models/TRAINED: the model trained on Debian text (models/TRAINED/README.md)


def log(msg):
    print(f"I: {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def warn(msg):
    print(f"W: {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


class MemoryCap:
    """One cgroup v1 memory child group; every capped run is started inside it.

    The v1 memory controller charges a group for its processes' anonymous memory, shared memory
    (the runtime's shm arena) and the page cache pages they bring in, so `memory.limit_in_bytes`
    caps RSS + page cache together, and the kernel reclaims the group's page cache first when it
    reaches the limit. `available` is False (and `reason` says why) when the controller is missing
    or not writable; runs then go uncapped and the report says so.
    """

    def __init__(self, name):
        self.path = os.path.join(CGROUP_V1_ROOT, name)
        self.available = False
        self.reason = ""
        self.limit_bytes = None
        if not os.path.isdir(CGROUP_V1_ROOT):
            self.reason = f"{CGROUP_V1_ROOT} is not mounted (no cgroup v1 memory controller)"
            return
        try:
            os.makedirs(self.path, exist_ok=True)
            self._write("memory.limit_in_bytes", "-1")
            self.available = True
        except OSError as e:
            self.reason = f"cannot create/write {self.path}: {e}"

    def _write(self, key, value):
        with open(os.path.join(self.path, key), "w") as f:
            f.write(str(value))

    def _read(self, key):
        with open(os.path.join(self.path, key)) as f:
            return f.read()

    def set_limit(self, limit_bytes):
        if not self.available:
            return
        self.limit_bytes = limit_bytes
        # Lowering the limit below the current charge fails with EBUSY; the group is empty between
        # runs, and force_empty reclaims what is left charged to it (page cache).
        try:
            self._write("memory.force_empty", "0")
        except OSError:
            pass
        self._write("memory.limit_in_bytes", str(limit_bytes if limit_bytes else -1))

    def reset_peak(self):
        if self.available:
            for key in ("memory.max_usage_in_bytes", "memory.failcnt"):
                try:
                    self._write(key, "0")
                except OSError:
                    pass

    def peak_bytes(self):
        return int(self._read("memory.max_usage_in_bytes")) if self.available else None

    def oom_kills(self):
        if not self.available:
            return 0
        for line in self._read("memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def preexec(self):
        """For subprocess preexec_fn: moves the child into the group before it execs."""
        if not self.available:
            return None
        procs = os.path.join(self.path, "cgroup.procs")

        def enter():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        return enter

    def remove(self):
        if self.available:
            try:
                os.rmdir(self.path)
            except OSError:
                pass


@contextlib.contextmanager
def server(zipmoe, args, log_path, cap, cap_bytes=None, cold=True, stop_timeout=30):
    """Starts `zipmoe ARGS --port P` (a free port) inside `cap` (limit `cap_bytes` for this server,
    lifted afterwards; None = the cap as it is), after dropping the page cache when `cold`, waits for
    GET /health == 200 (5 min; RuntimeError if it exits or never gets there), yields (url, process),
    and stops it: SIGTERM, then SIGKILL of its process group after `stop_timeout` s."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = open(log_path, "w")
    if cold:
        drop_caches()
    if cap.available and cap_bytes is not None:
        cap.set_limit(cap_bytes)
        cap.reset_peak()
    proc = subprocess.Popen([zipmoe] + list(args) + ["--port", str(port)], stdout=out,
                            stderr=subprocess.STDOUT, preexec_fn=cap.preexec(), start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            try:
                if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError(f"`zipmoe {args[0]}` did not become healthy (exit {proc.poll()}); see {log_path}")
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=stop_timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        out.close()
        if cap.available and cap_bytes is not None:
            cap.set_limit(None)


def drop_caches():
    """sync + drop the page cache, dentries and inodes (needs root). Returns False when not allowed."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def evict_written(paths):
    """Writes back and evicts the page cache of files this process just wrote (each file, or every file
    under a directory), so that the next read brings them in as any reader of a downloaded file would:
    Linux keeps written pages as the small folios they were written in, while a read from disk gets large
    folios (FileHugePages), and a peer that maps its file ran slower on written pages (llama.cpp's warm
    decode of the mini GGUF on a 2-core Zen 4, 2026-12-01: 0.077-0.086 s a token right after
    bench/gguf_writer.py, synced or not; 0.052-0.057 after this and a read). Errors are ignored."""
    os.sync()
    files = []
    for path in paths:
        if os.path.isdir(path):
            for root, _, names in os.walk(path):
                files += [os.path.join(root, n) for n in names]
        else:
            files.append(path)
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


class RunError(Exception):
    pass


def run_cmd(cmd, log_path, cap=None, limit_bytes=None, cold=True, timeout=None, env=None):
    """Runs `cmd` (a list), optionally inside `cap` with `limit_bytes`, after dropping the page cache
    when `cold`. Writes the command line, stdout and stderr to `log_path`. Returns a dict with wall_s,
    peak_bytes (group peak: RSS + page cache + shm, None when uncapped), oom_kills, rc, stdout.
    Raises RunError on a non-zero exit."""
    dropped = drop_caches() if cold else False
    preexec = None
    if cap is not None and cap.available:
        cap.set_limit(limit_bytes)
        cap.reset_peak()
        preexec = cap.preexec()
    oom_before = cap.oom_kills() if cap is not None else 0
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=preexec, timeout=timeout, env=env)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), \
            f"timed out after {timeout} s"
    wall = time.time() - t0
    with open(log_path, "w") as f:
        f.write(" ".join(cmd) + "\n" + out + err)
    res = {"wall_s": wall, "rc": rc, "stdout": out, "caches_dropped": dropped,
           "peak_bytes": cap.peak_bytes() if cap is not None and cap.available else None,
           "oom_kills": (cap.oom_kills() - oom_before) if cap is not None else 0,
           "limit_bytes": limit_bytes if cap is not None and cap.available else None}
    if cap is not None and cap.available:
        cap.set_limit(None)
    if rc != 0:
        raise RunError(f"exit {rc}{' (OOM-killed under the cap)' if res['oom_kills'] else ''}: {' '.join(cmd)}\n"
                       f"{err[-1500:]}", res)
    return res


def same_prefix(path, want):
    """True when the file at `path` is a byte prefix of `want` (bytes) and not empty."""
    got = open(path, "rb").read()
    return len(got) > 0 and want[:len(got)] == got


def cpu_model_and_flags():
    """(model name, set of flags) of the first CPU in /proc/cpuinfo (x86 "model name"/"flags", Arm
    "Model"/"Features"); (None, set()) when unreadable."""
    model, flags = None, set()
    try:
        for line in open("/proc/cpuinfo"):
            key = line.split(":", 1)[0].strip()
            if key in ("model name", "Model") and model is None:
                model = line.split(":", 1)[1].strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return model, flags


def machine_info():
    info = {"hostname": platform.node(), "kernel": platform.release(), "nproc": os.cpu_count()}
    model, _ = cpu_model_and_flags()
    if model:
        info["cpu"] = model
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                info["mem_gib"] = round(int(line.split()[1]) / (1 << 20), 1)
            elif line.startswith("MemAvailable"):
                info["mem_available_gib"] = round(int(line.split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    try:
        info["os"] = dict(l.rstrip().split("=", 1) for l in open("/etc/os-release") if "=" in l).get(
            "PRETTY_NAME", "").strip('"')
    except OSError:
        pass
    try:
        info["loadavg"] = open("/proc/loadavg").read().split()[:3]
    except OSError:
        pass
    if os.path.isdir("/dev/shm"):  # shared memory others hold (tmpfs: not reclaimable) shrinks what runs get
        sdf = shutil.disk_usage("/dev/shm")
        info["dev_shm_used_gib"] = round(sdf.used / GIB, 1)
    df = shutil.disk_usage("/")
    info["disk_free_gib"] = round(df.free / GIB, 1)
    info["gpu"] = gpu_info()
    return info


def gpu_info():
    """A CUDA device's name, or None (with no nvidia-smi / device the GPU experiment is skipped)."""
    if shutil.which("nvidia-smi") is None:
        return None
    p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return p.stdout.strip() or None if p.returncode == 0 else None


def git_commit(repo):
    p = subprocess.run(["git", "-C", repo, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    # The report's own outputs (docs/benchmarks.md, docs/bench/) being stale from a previous run is no change.
    dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":(exclude)docs/benchmarks.md", ":(exclude)docs/bench"],
                           capture_output=True, text=True).stdout.strip()
    return p.stdout.strip() + (" (+ uncommitted changes in the tree)" if dirty else "")


def dd_direct_gbps(path, block="1M", count=512):
    """Sequential O_DIRECT read bandwidth of `path` with dd (GB/s), or None."""
    p = subprocess.run(["dd", f"if={path}", "of=/dev/null", f"bs={block}", f"count={count}", "iflag=direct"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return None
    # "... bytes (...) copied, 0.9 s, 1.2 GB/s"
    last = p.stderr.strip().splitlines()[-1]
    try:
        nbytes = int(last.split()[0])
        secs = float(last.split(",")[-2].split()[0])
        return nbytes / secs / 1e9
    except (ValueError, IndexError):
        return None


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)


# ---------------------------------------------------------------- report helpers

DPI = 80
TARGETS = {"zipmoe/lru": 0.5, "zipmoe/mmap": 0.35, "TPOT/physical limit": 1.3, "makespan/bound": 1.2}
COLORS = {"zipmoe": "C3", "lru": "C0", "fifo": "C1", "lfu": "C2", "marking": "C4", "dali": "C6", "full-load": "C7",
          "mmap": "C5", "zipmoe-noplan": "C8", "zipmoe-fifo-dispatch": "C9", "smoe": "tab:olive",
          "coserve": "tab:brown"}


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None without matplotlib (the report then has its tables only)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def load(out, pattern):
    """The first OUT file matching `pattern` (glob), parsed, or None."""
    paths = sorted(glob.glob(os.path.join(out, pattern)))
    return json.load(open(paths[0])) if paths else None


def f3(x, nd=3):
    return "–" if x is None else f"{x:.{nd}f}"


def gib(x):
    return "–" if x is None else (f"{x / GIB:.2f}" if x >= GIB / 10 or x == 0 else f"{x / GIB:.4f}")
