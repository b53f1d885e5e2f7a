"""(m) llama.cpp as a peer (bench/llama_peer.mjs on a BF16 GGUF of the same weights): the memory-bandwidth decode
floor, warm TPOT / prefill of both, zipmoe's peak RSS, and cold TPOT vs memory cap for both, run in the suite's
cgroup memory group; its report section. An experiment of bench/suite.py (bench/experiments/__init__.py)."""
import contextlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import benchlib as bl
from benchlib import BENCH_DIR, COLORS, GIB, MIB, f3, gib, load

NAME = "m"
NEEDS = ("calibrate",)  # the mini model's cap overhead and warm-up trace (Suite.calibrate)
# prompt_len random ids (seed PEER_SEED) for both systems; warm: `rounds` × (zipmoe executor_bench with
# `zipmoe_reps` timed repetitions, llama_peer.mjs), `warm_decode` timed steps each, plus up to `extra_rounds`
# more while a system's best run shared the cores with > OTHERS_MAX cores of other work; cold sweep: caps where
# llama.cpp holds `llama_fractions` of its GGUF, where zipmoe's budget is `zipmoe_pcts` % of the expert bytes
# (llama.cpp runs there too only with `llama_at_zipmoe_pcts`), and zipmoe's smallest cap (one staging slot);
# `cold_tokens` new tokens per cold run; llama.cpp runs longer than `llama_timeout_s` time out; zipmoe runs each
# cap a second time with `--prefetch sweep_prefetch` (None: not).
PEER_SEED = 12345
# executor_bench's flag that keeps the weights in the files' memory maps (services/executor/weights_memory.h):
# its default, as `zipmoe generate`/`serve`'s, copies them into anonymous memory in the background, and the
# bench waits for that copy (the steady state a server reaches); this row shows the mapped page cache beside it.
MMAP = "--mmap"
# zipmoe's opt-in CPU kernel variants (kernels/bf16_gemm.h), run beside the default where the machine has them.
OPT_IN_ISAS = ("neonbf16",) if os.uname().machine in ("aarch64", "arm64") else ("avx512bf16", "amxbf16")
OTHERS_MAX = 0.3
# Narrower x86 CPU classes on a machine whose best kernels are wider: zipmoe's variant for the class
# (ZIPMOE_GEMM_ISA; the same bits as every default variant) against llama.cpp with only that class's CPU
# backend (libggml-cpu-<variant>.so) to load, in the same rounds: what a user with such a CPU gets, with
# this machine's memory system. (zipmoe kernel, llama.cpp backend, the class's name); not judged by the
# targets. AVX2: Zen 2/3, Intel Haswell to Comet Lake; AVX-512 without BF16: Intel Skylake-SP to Ice Lake
# servers (many cloud and GPU hosts), whose llama.cpp backend has no vdpbf16ps.
CPU_CLASSES = (("avx2", "haswell", "AVX2"), ("avx512", "skylakex", "AVX-512 without BF16"))
KERNEL_WIDTH = {"avx2": 1, "avx512": 2, "avx512bf16": 3, "amxbf16": 3}
# Held-out shapes (full mode): the synthetic minis of other decoder families llama.cpp runs too, warm only, each
# against its own floor: fine-grained experts (qwen3_moe: 128 experts of 384 rows, top-8, 16 / 2 heads;
# deepseek_v2: MLA, 64 of 704 rows, top-6 + 2 shared; glm4_moe: 128 of 352 rows, top-8 + 1 shared, 24 / 2
# heads, sigmoid router with a selection bias; gpt_oss: MXFP4 experts, 32 of 1440 rows, top-4, sinks and a sliding
# window) and coarse ones (mixtral: 8 of 7168 rows, top-2). Their HF
# directories and GGUFs stay under --models (7-15 GB each; written only with OTHER_ARCH_FREE_BYTES free).
OTHER_ARCHS = ["qwen3_moe", "deepseek_v2", "glm4_moe", "gpt_oss", "mixtral"]
OTHER_ARCH_FREE_BYTES = 16 * GIB
PEER_QUICK = {"sweep_prefetch": "residual", "prompt_len": 16, "warm_decode": 16, "zipmoe_reps": 2, "rounds": 1,
              "extra_rounds": 0, "membw_reps": 5, "cold_tokens": 8, "llama_fractions": [1.0, 0.5], "zipmoe_pcts": [50],
              "llama_at_zipmoe_pcts": False, "llama_timeout_s": 45, "zipmoe_timeout_s": 300, "other_archs": [],
              "other_rounds": 0, "cpu_classes": True}
PEER_FULL = {"sweep_prefetch": "residual", "prompt_len": 64, "warm_decode": 32, "zipmoe_reps": 3, "rounds": 3,
             "extra_rounds": 2, "membw_reps": 8, "cold_tokens": 16, "llama_fractions": [1.0, 0.85, 0.7, 0.5, 0.3],
             "zipmoe_pcts": [50, 25, 10], "llama_at_zipmoe_pcts": True, "llama_timeout_s": 600,
             "zipmoe_timeout_s": 1800, "other_archs": OTHER_ARCHS, "other_rounds": 2, "cpu_classes": True}
CONFIG = {"quick": {"peer": PEER_QUICK}, "full": {"peer": PEER_FULL}}


def quick_note(cfg):
    q, f = cfg["peer"], CONFIG["full"]["peer"]
    if (q["rounds"], q.get("extra_rounds")) == (f["rounds"], f["extra_rounds"]):
        return None
    extra = q.get("extra_rounds", 0)
    return (f"(m) {q['rounds']} warm round(s), {f'up to {extra} more' if extra else 'no extra one'} while other work "
            f"shared the cores (`--full`: {f['rounds']} + up to {f['extra_rounds']})")


def cpu_busy_s():
    """Seconds of CPU time the whole machine has spent busy (all cores, /proc/stat: not idle or iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def safetensors_tensors(model_dir):
    """{tensor name: bytes} from the headers of every *.safetensors file of `model_dir`."""
    out = {}
    for name in sorted(os.listdir(model_dir)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(model_dir, name), "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        for key, t in header.items():
            if key != "__metadata__":
                out[key] = t["data_offsets"][1] - t["data_offsets"][0]
    return out


def decode_bytes_per_token(tensors, config):
    """Weight bytes one decode token reads: every dense weight except the embedding (attention, norms, shared
    experts, routers, dense MLPs), top_k routed experts per MoE layer (at the layer's mean expert size; a tensor
    that holds all of a layer's experts counts 1/n_experts per expert), and lm_head (a tied embedding counts
    once, as lm_head). The embedding lookup reads one row, and layers past num_hidden_layers (multi-token
    prediction) are not run: neither is counted."""
    expert = re.compile(r"\.layers\.(\d+)\..*\.experts\.(\d+)\.")
    # every expert of a layer in one tensor [n_experts, ...] (gpt_oss's MXFP4 blocks, scales and biases)
    fused = re.compile(r"\.layers\.(\d+)\..*\.experts\.[a-z_]+$")
    n_experts = expert_count(config)
    layer_of = re.compile(r"\.layers\.(\d+)\.")
    n_layers = int(config.get("num_hidden_layers") or 0)
    layers = {}
    dense = emb = head = 0
    for name, nbytes in tensors.items():
        at = layer_of.search(name)
        if at and n_layers and int(at.group(1)) >= n_layers:
            continue  # a multi-token-prediction layer (glm4_moe, deepseek_v3): not run by a decode step
        hit = expert.search(name)
        whole = fused.search(name) if not hit else None
        if hit:
            per = layers.setdefault(int(hit.group(1)), {})
            per[int(hit.group(2))] = per.get(int(hit.group(2)), 0) + nbytes
        elif whole and n_experts:
            per = layers.setdefault(int(whole.group(1)), {})
            for e in range(n_experts):
                per[e] = per.get(e, 0) + nbytes / n_experts
        elif "embed_tokens" in name:
            emb += nbytes
        elif name.startswith("lm_head"):
            head += nbytes
        else:
            dense += nbytes
    top_k = int(config.get("num_experts_per_tok") or 0)
    routed = sum(top_k * sum(per.values()) / len(per) for per in layers.values())
    tied = head == 0
    return {"dense": dense, "routed": int(routed), "lm_head": emb if tied else head, "tied_embeddings": tied,
            "embedding_not_counted": 0 if tied else emb, "moe_layers": len(layers), "top_k": top_k,
            "total": int(dense + routed + (emb if tied else head))}


# CPU flags that decide which matrix kernels a system can run (ours and llama.cpp's variants).
KERNEL_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                "amx_tile", "amx_bf16", "amx_int8", "avx_vnni", "asimd", "bf16", "i8mm", "sve", "sve2")


def cpu_description():
    """The CPU model, its core count and which of KERNEL_FLAGS it has (bench (m) reports it per machine)."""
    model, flags = bl.cpu_model_and_flags()
    return {"cpu": model, "nproc": os.cpu_count(), "flags": [f for f in KERNEL_FLAGS if f in flags]}


def run_group(s, cmd, log, capped=False, limit=None, cold=False, timeout=None):
    """Runs `cmd` in its own session (optionally inside the cap with `limit`, after dropping the page cache
    when `cold`) and kills its whole process group after `timeout` s. Returns rc (124 on timeout, 127 when it
    cannot start), timed_out, wall_s, stdout, the child's max RSS, page faults and CPU times (wait4 rusage),
    others_cpu (CPU the rest of the machine used meanwhile, in cores: /proc/stat busy time minus the child's),
    and the group's peak / OOM kills."""
    dropped = bl.drop_caches() if cold else False
    enter = None
    use_cap = capped and s.cap.available
    if use_cap:
        s.cap.set_limit(limit)
        s.cap.reset_peak()
        enter = s.cap.preexec()
    oom0 = s.cap.oom_kills() if use_cap else 0
    timed_out = False
    busy0 = cpu_busy_s()
    with open(os.path.join(s.logs, log), "w") as lf, tempfile.TemporaryFile() as out:
        lf.write(" ".join(cmd) + (f"   [cap {limit / bl.GIB:.2f} GiB]" if use_cap and limit else "") + "\n")
        lf.flush()
        t0 = time.time()
        try:
            p = subprocess.Popen(cmd, stdout=out, stderr=lf, preexec_fn=enter, start_new_session=True)
        except OSError as e:
            lf.write(f"cannot start: {e}\n")
            if use_cap:
                s.cap.set_limit(None)
            return {"rc": 127, "timed_out": False, "wall_s": 0.0, "stdout": "", "caches_dropped": dropped,
                    "maxrss_bytes": None, "major_faults": None, "minor_faults": None, "user_s": None,
                    "sys_s": None, "others_cpu": None, "peak_bytes": None, "oom_kills": 0,
                    "limit_bytes": limit if use_cap else None}
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if timeout and time.time() - t0 > timeout:
                os.killpg(p.pid, signal.SIGKILL)
                _, status, ru = os.wait4(p.pid, 0)
                timed_out = True
                break
            time.sleep(0.05)
        wall = time.time() - t0
        others = max(0.0, cpu_busy_s() - busy0 - ru.ru_utime - ru.ru_stime) / max(wall, 1e-3)
        p.returncode = rc = 124 if timed_out else os.waitstatus_to_exitcode(status)
        out.seek(0)
        stdout = out.read().decode(errors="replace")
        lf.write(stdout[-4000:] + (f"\n[timed out after {timeout} s]\n" if timed_out else ""))
    res = {"rc": rc, "timed_out": timed_out, "wall_s": wall, "stdout": stdout, "caches_dropped": dropped,
           "maxrss_bytes": ru.ru_maxrss * 1024, "major_faults": ru.ru_majflt, "minor_faults": ru.ru_minflt,
           "user_s": ru.ru_utime, "sys_s": ru.ru_stime, "others_cpu": round(others, 2),
           "peak_bytes": s.cap.peak_bytes() if use_cap else None,
           "oom_kills": (s.cap.oom_kills() - oom0) if use_cap else 0, "limit_bytes": limit if use_cap else None}
    if use_cap:
        s.cap.set_limit(None)
    return res


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def peer_gguf(s, m, log="gguf_writer.log"):
    """The GGUF of the HF checkpoint (bench/gguf_writer.py), written once next to the model dirs."""
    path = m["root"] + ".gguf"
    if not os.path.exists(path):
        bl.log(f"gguf_writer {m['hf']} -> {path}")
        bl.run_cmd([sys.executable, os.path.join(BENCH_DIR, "gguf_writer.py"), m["hf"], "--out", path],
                   os.path.join(s.logs, log), cold=False)
        bl.evict_written([path])  # read back later as a downloaded file is (benchlib.evict_written)
    return path


def expert_count(config):
    """The routed experts of a layer, whichever config.json key the family uses."""
    return int(config.get("num_experts") or config.get("n_routed_experts") or config.get("num_local_experts") or 0)


def min_budget(s, m):
    """zipmoe's smallest --memory-budget (one staging slot), from the error it gives below it."""
    p = subprocess.run([s.zipmoe, "generate", "--model", m["zstd"], "--prompt-ids", "0", "--max-new-tokens",
                        "1", "--memory-budget", "1"], capture_output=True, text=True)
    hit = re.search(r"below the minimum (\d+) bytes", p.stdout + p.stderr)
    return int(hit.group(1)) if hit else None


def page_in(paths):
    """Reads files into the page cache (from this process's cgroup, so a capped run that maps them later is
    not charged for them); returns {path: resident fraction} when fincore is installed."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(16 << 20):
                pass
    return residency(paths)


def residency(paths):
    if not shutil.which("fincore"):
        return None
    p = subprocess.run(["fincore", "-b", "-n", "-r", "-o", "RES,SIZE"] + list(paths), capture_output=True,
                       text=True)
    try:
        res = [tuple(int(x) for x in line.split()) for line in p.stdout.strip().splitlines()]
        return round(sum(r for r, _ in res) / max(1, sum(sz for _, sz in res)), 4)
    except ValueError:
        return None


def membw(s, reps, log):
    r = run_group(s, [os.path.join(s.a.bin, "membw_bench"), "--threads", str(s.threads), "--reps",
                      str(reps)], log, timeout=300)
    j = last_json(r["stdout"]) if r["rc"] == 0 else None
    if j:
        j["others_cpu"] = r["others_cpu"]
        bl.log(f"m: memory read bandwidth {j['gbps']:.1f} GB/s best, {j['gbps_median']:.1f} median "
               f"(others used {r['others_cpu']:.2f} cores)")
    return j


def round_membw(s, name, i):
    """The bandwidth right before a run: the VM's drifts by 1.5x within minutes, so each run is judged against
    the floor of its own moment (issue 35 item 2)."""
    b = membw(s, 2, f"membw-{name}-{i}.log")
    return b["gbps"] if b else None


def logged(row, prefix, i, r, program, log):
    """Logs a warm row's TPOT and prefill, or names the failed run and its log in row["error"]; returns the row."""
    if row["ok"]:
        bl.log(f"{prefix}: warm {row['system']} #{i}: tpot {row['tpot_s']:.4f} s, prefill "
               f"{row['prefill_tokens_per_s']:.1f} tok/s (others used {r['others_cpu']:.2f} cores)")
    else:
        row["error"] = f"{program} exit {r['rc']} (logs/{log})"
        bl.warn(f"{prefix}: {row['error']}")
    return row


def warm_zipmoe(s, pc, hf, ids_s, i, isa=None, prefix="m"):
    """One warm executor_bench run on the HF directory `hf` (round `i`); `isa` runs an opt-in variant as the
    system "zipmoe (isa)": a kernel variant (ZIPMOE_GEMM_ISA), or None (no row) when this machine does not have
    it; or MMAP, the weights kept in the files' memory maps (executor_bench --mmap). Returns the row."""
    name = "zipmoe" if isa is None else f"zipmoe ({isa})"
    tag = "zipmoe" if isa is None else f"zipmoe-{isa.lstrip('-')}"
    hf_files = sorted(os.path.join(hf, f) for f in os.listdir(hf) if f.endswith(".safetensors"))
    bw_now = round_membw(s, f"{prefix}-{tag}" if prefix != "m" else tag, i)
    resid = residency(hf_files)
    env = [] if isa in (None, MMAP) else ["env", f"ZIPMOE_GEMM_ISA={isa}"]
    extra = [MMAP] if isa == MMAP else []
    r = run_group(s, env + [os.path.join(s.a.bin, "executor_bench"), hf, "--threads", str(s.threads),
                            "--prompt-ids", ids_s, "--decode-tokens", str(pc["warm_decode"]), "--reps",
                            str(pc["zipmoe_reps"])] + extra, f"{prefix}-warm-{tag}-{i}.log", capped=True,
                  limit=None, timeout=600)
    reps = [(float(a), float(b), float(c)) for a, b, c in re.findall(
        r"rep \d+: ttft ([0-9.]+) s, tpot ([0-9.]+) s, prefill ([0-9.]+) tokens/s", r["stdout"])]
    ran = re.search(r"I: gemm isa (\w+)", r["stdout"])
    if isa not in (None, MMAP) and (ran is None or ran.group(1) != isa):
        bl.log(f"{prefix}: no {isa} kernel variant on this machine (it ran {ran.group(1) if ran else 'nothing'})")
        return None
    row = {"system": name, "round": i, "ok": r["rc"] == 0 and bool(reps), "resident": resid,
           "wall_s": r["wall_s"], "peak_bytes": r["peak_bytes"], "others_cpu": r["others_cpu"],
           "kernel": ran.group(1) if ran else None, "membw_gbps": bw_now,
           "prefetch": (re.search(r"gemv prefetch (\w+)", r["stdout"]) or [None, None])[1]}
    if row["ok"]:
        row.update({"tpot_s": min(x[1] for x in reps), "prefill_tokens_per_s": max(x[2] for x in reps),
                    "reps": [{"ttft_s": a, "tpot_s": b, "prefill_tokens_per_s": c} for a, b, c in reps]})
    return logged(row, prefix, i, r, "executor_bench", f"{prefix}-warm-{tag}-{i}.log")


def llama_variant_cmd(s, variant):
    """llama_peer.mjs's command line with only llama.cpp's `variant` CPU backend (libggml-cpu-<variant>.so)
    to load: bench/node_modules hard-linked (copied across file systems) under the output directory with the
    other CPU backends left out, and llama_peer.mjs beside it, so ggml's choice of the best backend it finds
    can only be this one. None (logged) where the bundle has no such backend or the copy fails."""
    src = os.path.join(BENCH_DIR, "node_modules")
    bins = os.path.join("@node-llama-cpp", "linux-x64", "bins", "linux-x64")
    if not os.path.exists(os.path.join(src, bins, f"libggml-cpu-{variant}.so")):
        bl.log(f"m: llama.cpp has no {variant} CPU backend here ({os.path.join(src, bins)})")
        return None
    dest = os.path.join(s.out, f"llama-{variant}")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for flags in (["-al"], ["-a"]):  # hard links where the file system allows, else a copy (85 MB)
        r = subprocess.run(["cp", *flags, src, os.path.join(dest, "node_modules")], capture_output=True, text=True)
        if r.returncode == 0:
            break
        shutil.rmtree(os.path.join(dest, "node_modules"), ignore_errors=True)
    else:
        bl.log(f"m: could not copy {src} for the {variant} backend: {r.stderr.strip()[-200:]}")
        return None
    for f in os.listdir(os.path.join(dest, "node_modules", bins)):
        if f.startswith("libggml-cpu-") and f != f"libggml-cpu-{variant}.so":
            os.remove(os.path.join(dest, "node_modules", bins, f))  # a link of its own: the original stays
    shutil.copy(os.path.join(BENCH_DIR, "llama_peer.mjs"), dest)
    return ["node", os.path.join(dest, "llama_peer.mjs")]


def warm_llama(s, pc, llama_cmd, gguf, i, prefix="m", variant=None):
    """One warm llama_peer.mjs run on `gguf` (round `i`); `variant`: llama_cmd loads only that CPU backend
    (llama_variant_cmd), the system "llama.cpp (variant)". Returns the row."""
    name = "llama.cpp" if variant is None else f"llama.cpp ({variant})"
    tag = "llama" if variant is None else f"llama-{variant}"
    bw_now = round_membw(s, f"{prefix}-{tag}" if prefix != "m" else tag, i)
    resid = residency([gguf])
    r = run_group(s, llama_cmd + ["--decode-tokens", str(pc["warm_decode"]), "--warmup-tokens", "2",
                                  "--prefill-reps", "3"], f"{prefix}-warm-{tag}-{i}.log", capped=True,
                  limit=None, timeout=600)
    j = last_json(r["stdout"]) if r["rc"] == 0 else None
    row = {"system": name, "round": i, "ok": j is not None, "resident": resid, "wall_s": r["wall_s"],
           "peak_bytes": r["peak_bytes"], "others_cpu": r["others_cpu"], "membw_gbps": bw_now}
    if j:
        row.update({k: j.get(k) for k in ("tpot_s", "prefill_tokens_per_s", "prefill_s", "load_s",
                                          "decode_step_s", "generated_ids", "llama_cpp_release")})
        row["kernel"] = j.get("cpu_variant")  # which libggml-cpu-<variant>.so it loaded
        if variant is not None and row["kernel"] != variant:
            bl.log(f"m: llama.cpp loaded {row['kernel']}, not {variant}: row dropped")
            return None
    return logged(row, prefix, i, r, "llama_peer.mjs", f"{prefix}-warm-{tag}-{i}.log")


def best_of(warm, floor_bytes):
    """Per system of the warm rows: its best TPOT and prefill, their medians over the interleaved rounds (the
    VM's bandwidth drifts: both), and each run's TPOT over the floor at its own moment's bandwidth."""
    best = {}
    for sysname in ("zipmoe", "llama.cpp"):
        ok = [w for w in warm if w["system"] == sysname and w["ok"]]
        if not ok:
            continue
        fastest = min(ok, key=lambda w: w["tpot_s"])
        prefill = max(ok, key=lambda w: w["prefill_tokens_per_s"])
        best[sysname] = {"tpot_s": fastest["tpot_s"], "others_cpu": fastest["others_cpu"],
                         "prefill_tokens_per_s": prefill["prefill_tokens_per_s"],
                         "prefill_others_cpu": prefill["others_cpu"],
                         "peak_bytes": max((w["peak_bytes"] or 0) for w in ok) or None,
                         "tpot_s_median": statistics.median(w["tpot_s"] for w in ok),
                         "prefill_tokens_per_s_median": statistics.median(w["prefill_tokens_per_s"] for w in ok),
                         "kernel": next((w.get("kernel") for w in ok if w.get("kernel")), None),
                         "prefetch": next((w.get("prefetch") for w in ok if w.get("prefetch")), None)}
        floors = [w["tpot_s"] / (floor_bytes / (w["membw_gbps"] * 1e9)) for w in ok if w.get("membw_gbps")]
        if floors:
            best[sysname]["floor_ratio_median"] = statistics.median(floors)
            best[sysname]["floor_ratio_min"] = min(floors)
    return best


def paired_tpot_ratios(warm):
    """zipmoe's TPOT over llama.cpp's, round by round (the rounds both ran)."""
    z = {w["round"]: w for w in warm if w["system"] == "zipmoe" and w["ok"]}
    ll = {w["round"]: w for w in warm if w["system"] == "llama.cpp" and w["ok"]}
    return [z[k]["tpot_s"] / ll[k]["tpot_s"] for k in z if k in ll]


def other_arch(s, pc, arch, llama_ok):
    """Warm rows of one held-out architecture (OTHER_ARCHS): its synthetic mini (synth, cached under --models,
    the same seed / skew as the qwen2_moe mini) and its GGUF, `other_rounds` interleaved rounds of both systems
    with the same random prompt ids, each run judged against the floor of its own bytes and moment."""
    root = s.model_root(arch, "mini")
    hf, gguf = root + "-hf", root + ".gguf"
    out = {"arch": arch}
    have = os.path.exists(os.path.join(hf, "config.json")) and (os.path.exists(gguf) or not llama_ok)
    free = shutil.disk_usage(s.a.models).free
    if not have and free < OTHER_ARCH_FREE_BYTES:
        out["skipped"] = f"{free / GIB:.1f} GiB free under --models, {OTHER_ARCH_FREE_BYTES / GIB:.0f} needed"
        bl.warn(f"m: {arch}: skipped ({out['skipped']})")
        return out
    try:
        s.synth(arch, "mini")
        if llama_ok:
            peer_gguf(s, {"root": root, "hf": hf}, log=f"gguf_writer-{arch}.log")
    except bl.RunError as e:
        out["error"] = e.args[0][:300]
        bl.warn(f"m: {arch}: {out['error']}")
        return out
    config = json.load(open(os.path.join(hf, "config.json")))
    out["shape"] = {k: config.get(k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                "num_key_value_heads", "moe_intermediate_size", "intermediate_size",
                                                "num_experts_per_tok")}
    out["shape"]["experts"] = expert_count(config)
    # an expert's rows: mixtral's experts are intermediate_size wide (it has no moe_intermediate_size)
    out["shape"]["expert_rows"] = config.get("moe_intermediate_size") or config.get("intermediate_size")
    fb = out["floor_bytes"] = decode_bytes_per_token(safetensors_tensors(hf), config)
    rng = random.Random(PEER_SEED)
    ids_s = ",".join(str(rng.randrange(int(config["vocab_size"]))) for _ in range(pc["prompt_len"]))
    hf_files = sorted(os.path.join(hf, f) for f in os.listdir(hf) if f.endswith(".safetensors"))
    out["resident_before"] = page_in(hf_files + ([gguf] if llama_ok else []))
    llama_cmd = ["node", os.path.join(BENCH_DIR, "llama_peer.mjs"), "--model", gguf, "--threads", str(s.threads),
                 "--prompt-ids", ids_s]
    warm = []
    for i in range(pc["other_rounds"]):
        row = warm_zipmoe(s, pc, hf, ids_s, i, prefix=f"m-{arch}")
        warm.append(row)
        if llama_ok:
            warm.append(warm_llama(s, pc, llama_cmd, gguf, i, prefix=f"m-{arch}"))
    out["warm"] = warm
    out["best"] = best_of(warm, fb["total"])
    paired = paired_tpot_ratios(warm)
    if paired:
        out["tpot_ratio_per_round"] = paired
        out["tpot_ratio_median"] = statistics.median(paired)
    return out


def run(s):
    """llama.cpp (node-llama-cpp, bench/llama_peer.mjs) on a BF16 GGUF of the same checkpoint.
    (1) decode floor = bytes one decode token reads / memory bandwidth (membw_bench, same run);
    (2) warm, all weights in the page cache, same prompt ids and threads: zipmoe (executor_bench on the HF
    dir) and llama.cpp interleaved `rounds` times, best of each; (3) peak RSS of an all-resident
    `zipmoe generate` (/usr/bin/time -f %M) vs checkpoint bytes × 1.05 + 512 MiB; (4) cold TPOT vs cap,
    both systems in the same cgroup limit with the page cache dropped before each run (zipmoe: the
    compressed dir, --memory-budget = cap - its overhead from calibrate()); (5) zipmoe's cold TPOT at 50 %
    over its warm TPOT."""
    m = s.mini
    pc = s.cfg["peer"]
    res = {"config": pc, "threads": s.threads, "seed": PEER_SEED, "others_max": OTHERS_MAX,
           "machine": cpu_description()}
    rng = random.Random(PEER_SEED)
    ids = [rng.randrange(int(m["config"]["vocab_size"])) for _ in range(pc["prompt_len"])]
    ids_s = ",".join(map(str, ids))
    res["prompt_ids"] = ids
    tensors = safetensors_tensors(m["hf"])
    res["floor_bytes"] = decode_bytes_per_token(tensors, m["config"])
    res["checkpoint_bytes"] = sum(tensors.values())
    hf_files = sorted(os.path.join(m["hf"], f) for f in os.listdir(m["hf"]) if f.endswith(".safetensors"))
    # llama.cpp: node-llama-cpp (bench/install_peer.sh, idempotent) and the GGUF.
    gguf = None
    inst = subprocess.run(["bash", os.path.join(BENCH_DIR, "install_peer.sh")], capture_output=True, text=True)
    open(os.path.join(s.logs, "install_peer.log"), "w").write(inst.stdout + inst.stderr)
    if inst.returncode != 0:
        res["llama_error"] = f"bench/install_peer.sh failed: {(inst.stdout + inst.stderr).strip()[-300:]}"
        bl.warn(f"m: {res['llama_error']}")
    else:
        try:
            gguf = peer_gguf(s, m)
            res["gguf_bytes"] = os.path.getsize(gguf)
        except bl.RunError as e:
            res["llama_error"] = f"bench/gguf_writer.py failed: {e.args[0][:300]}"
            bl.warn(f"m: {res['llama_error']}")
    llama_cmd = ["node", os.path.join(BENCH_DIR, "llama_peer.mjs"), "--model", gguf or "", "--threads",
                 str(s.threads), "--prompt-ids", ids_s]
    # (1) + (2): warm, interleaved; bandwidth measured before and after.
    bw = [membw(s, pc["membw_reps"], "membw-1.log")]
    mem = {}
    for line in open("/proc/meminfo"):
        if line.startswith(("MemTotal", "MemAvailable")):
            mem[line.split(":")[0]] = int(line.split()[1]) * 1024
    res["mem_available_bytes"] = mem.get("MemAvailable")
    t0 = time.time()
    res["resident_before"] = page_in(hf_files + ([gguf] if gguf else []))
    res["page_in_s"] = round(time.time() - t0, 1)
    warm = []

    def disturbed():
        """True while some system's best warm run shared the machine with > OTHERS_MAX cores of other work."""
        for sysname in ("zipmoe", "llama.cpp") if gguf else ("zipmoe",):
            ok = [w for w in warm if w["system"] == sysname and w["ok"]]
            if ok and min(ok, key=lambda w: w["tpot_s"])["others_cpu"] > OTHERS_MAX:
                return True
        return False

    def zipmoe_round(i, isa=None):
        row = warm_zipmoe(s, pc, m["hf"], ids_s, i, isa)
        if row:
            warm.append(row)
        return row is not None

    opt_in = list(OPT_IN_ISAS) + [MMAP]
    # The narrower CPU classes (CPU_CLASSES) both sides have here: llama.cpp's command for each.
    class_cmds = {}
    if pc.get("cpu_classes") and gguf and os.uname().machine in ("x86_64", "AMD64"):
        for isa, variant, _ in CPU_CLASSES:
            cmd = llama_variant_cmd(s, variant)
            if cmd:
                class_cmds[(isa, variant)] = cmd + llama_cmd[2:]
    i = 0
    while i < pc["rounds"] or (i < pc["rounds"] + pc["extra_rounds"] and disturbed()):
        if i >= pc["rounds"]:
            bl.log("m: extra warm round: a best run shared the cores with other work")
        zipmoe_round(i)
        if gguf:
            warm.append(warm_llama(s, pc, llama_cmd, gguf, i))
        # The opt-in kernel variants this machine has (docs/architecture.md "CPU kernels") and --mmap, in
        # the same rounds: not in the targets (the variants' bits differ from the default's; --mmap is not
        # the default), reported beside them.
        opt_in[:] = [isa for isa in opt_in if zipmoe_round(i, isa)]
        # Each class where zipmoe's own kernel is at least as wide and llama.cpp loaded another backend; the
        # main zipmoe row stands for the class when its kernel is the class's.
        main_z = next((w for w in warm if w["system"] == "zipmoe" and w["round"] == i and w.get("ok")), None)
        main_l = next((w for w in warm if w["system"] == "llama.cpp" and w["round"] == i and w.get("ok")), None)
        for (isa, variant), cmd in list(class_cmds.items()):
            width = KERNEL_WIDTH.get((main_z or {}).get("kernel"), 0)
            if width < KERNEL_WIDTH[isa] or (main_l or {}).get("kernel") == variant:
                del class_cmds[(isa, variant)]  # this machine's own pair is that class
                continue
            if width > KERNEL_WIDTH[isa] and not zipmoe_round(i, isa):
                del class_cmds[(isa, variant)]
                continue
            row = warm_llama(s, pc, cmd, gguf, i, variant=variant)
            if row:
                warm.append(row)
            else:
                del class_cmds[(isa, variant)]
        i += 1
    for _, variant, _ in CPU_CLASSES:
        shutil.rmtree(os.path.join(s.out, f"llama-{variant}"), ignore_errors=True)
    bw.append(membw(s, pc["membw_reps"], "membw-2.log"))
    bw = [b for b in bw if b]
    res["warm"] = warm
    res["membw"] = bw
    res["membw_gbps"] = max(b["gbps"] for b in bw) if bw else None
    res["membw_gbps_median"] = sorted(x for b in bw for x in b["gbps_runs"])[
        len([x for b in bw for x in b["gbps_runs"]]) // 2] if bw else None
    if res["membw_gbps"]:
        res["floor_s"] = res["floor_bytes"]["total"] / (res["membw_gbps"] * 1e9)
    best = best_of(warm, res["floor_bytes"]["total"])
    paired = paired_tpot_ratios(warm)
    if paired:
        res["tpot_ratio_per_round"] = paired
        res["tpot_ratio_median"] = statistics.median(paired)
    res["best"] = best
    # (3) peak RSS of an all-resident generate (warm), and the resident run's tokens for the cold runs.
    rss_file = os.path.join(s.out, "m-rss.txt")
    r = run_group(s, ["/usr/bin/time", "-f", "%M", "-o", rss_file, s.zipmoe, "generate", "--model", m["hf"],
                      "--prompt-ids", ids_s, "--max-new-tokens", str(pc["cold_tokens"]), "--ignore-eos",
                      "--threads", str(s.threads), "--json"], "m-rss-generate.log", timeout=600)
    j = last_json(r["stdout"]) if r["rc"] == 0 else None
    resident_ids = None
    if j:
        try:
            kb = int(open(rss_file).read().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            kb = None
        resident_ids = j["generated_ids"]
        res["rss"] = {"peak_rss_bytes": kb * 1024 if kb else None, "weights_bytes": res["checkpoint_bytes"],
                      "allowed_bytes": int(res["checkpoint_bytes"] * 1.05) + 512 * bl.MIB,
                      "tpot_s": j["tpot_s"], "ttft_s": j["ttft_s"], "major_faults": r["major_faults"],
                      "generated_ids": resident_ids}
        bl.log(f"m: all-resident generate: peak RSS {(kb or 0) / (1 << 20):.2f} GiB, tpot {j['tpot_s']:.4f} s")
    else:
        res["rss"] = {"error": f"zipmoe generate exit {r['rc']} (logs/m-rss-generate.log)"}
    with contextlib.suppress(OSError):
        os.remove(rss_file)
    # (4) + (5) cold sweep, both systems under the same cap.
    res["sweep"] = peer_sweep(s, m, pc, res, gguf, llama_cmd, ids_s, resident_ids)
    zw = best.get("zipmoe")
    r50 = next((x for x in res["sweep"].get("rows", []) if x["zipmoe"].get("budget_pct") == 50
                and x["zipmoe"].get("ok")), None)
    if zw and r50:
        res["cold50_over_warm"] = r50["zipmoe"]["tpot_s"] / zw["tpot_s"]
        if (r50.get("zipmoe_prefetch") or {}).get("ok"):
            res["cold50_over_warm_prefetch"] = r50["zipmoe_prefetch"]["tpot_s"] / zw["tpot_s"]
    # (6) held-out architectures, warm, after everything else (their page-in evicts the mini's files).
    res["other_archs"] = [other_arch(s, pc, arch, gguf is not None) for arch in pc.get("other_archs", [])]
    s.save("m_llama_peer", res)


def peer_sweep(s, m, pc, res, gguf, llama_cmd, ids_s, resident_ids):
    if not s.cap.available:
        return {"skipped": f"no memory cap: {s.cap.reason}"}
    if "overhead_bytes" not in m:
        return {"skipped": "zipmoe's overhead was not calibrated"}
    E, oz = m["expert_bytes"], m["overhead_bytes"]
    lw = [w["peak_bytes"] for w in res["warm"] if w["system"] == "llama.cpp" and w["ok"] and w["peak_bytes"]]
    slack = 256 * bl.MIB
    # llama.cpp's overhead: its warm runs' group peak (the GGUF was paged in outside the group, so the peak
    # is its own memory: node, llama.cpp's buffers, KV cache) + the same slack as zipmoe's, in 64 MiB steps.
    ol = ((max(lw) + slack) // (64 * bl.MIB) + 1) * 64 * bl.MIB if lw else None
    G = res.get("gguf_bytes")
    zmin = min_budget(s, m)
    out = {"zipmoe_overhead_bytes": oz, "llama_overhead_bytes": ol, "llama_warm_peak_bytes": max(lw) if lw else None,
           "zipmoe_min_budget_bytes": zmin, "expert_bytes": E, "gguf_bytes": G, "tokens": pc["cold_tokens"],
           "llama_timeout_s": pc["llama_timeout_s"]}
    caps = []  # (label, cap bytes, llama.cpp runs there too)
    if G and ol:
        caps += [(f"llama.cpp holds {f:.0%} of its GGUF", int(f * G) + ol, True) for f in pc["llama_fractions"]]
    caps += [(f"zipmoe {p} % budget", E * p // 100 + oz, pc["llama_at_zipmoe_pcts"]) for p in pc["zipmoe_pcts"]]
    floor_cap = (zmin or E // 100) + oz
    caps.append(("zipmoe's smallest cap (one staging slot)", floor_cap, True))
    merged = []
    for label, cap, with_llama in sorted(caps, key=lambda c: -c[1]):
        if cap < floor_cap:
            continue
        if merged and merged[-1][1] - cap < 64 * bl.MIB:
            merged[-1] = (merged[-1][0] + "; " + label, merged[-1][1], merged[-1][2] or with_llama)
        else:
            merged.append((label, cap, with_llama))
    rows = []
    n = pc["cold_tokens"]
    for label, cap, with_llama in merged:
        budget = max(zmin or 0, min(E, cap - oz))
        row = {"cap_bytes": cap, "label": label,
               "llama_holds": (cap - ol) / G if G and ol else None}
        row["zipmoe"] = z = cold_zipmoe(s, m, pc, cap, budget, "zipmoe", ids_s, resident_ids)
        if z.get("preload"):
            row["zipmoe_preload"] = z["preload"]
        if pc.get("sweep_prefetch"):
            row["zipmoe_prefetch"] = cold_zipmoe(s, m, pc, cap, budget, f"zipmoe+{pc['sweep_prefetch']}", ids_s,
                                                 resident_ids)
        lrow = {"ok": False, "skipped": True}
        if gguf and with_llama:
            tag = f"m-cold-llama-{cap // bl.MIB}MiB"
            r = run_group(s, llama_cmd + ["--decode-tokens", str(n - 1), "--warmup-tokens", "0", "--prefill-reps",
                                          "1", "--progress"], tag + ".log", capped=True, limit=cap, cold=True,
                          timeout=pc["llama_timeout_s"])
            j = last_json(r["stdout"]) if r["rc"] == 0 else None
            lrow = {"ok": j is not None, "timed_out": r["timed_out"], "oom": r["oom_kills"] > 0,
                    "peak_bytes": r["peak_bytes"], "wall_s": r["wall_s"], "major_faults": r["major_faults"],
                    "minor_faults": r["minor_faults"], "sys_s": r["sys_s"], "others_cpu": r["others_cpu"]}
            if j:
                lrow.update({k: j.get(k) for k in ("tpot_s", "prefill_s", "load_s", "decode_step_s", "generated_ids")})
            elif r["timed_out"]:
                # What it finished before the limit (llama_peer.mjs --progress lines in its log).
                prog = []
                for line in open(os.path.join(s.logs, tag + ".log"), errors="replace"):
                    if line.startswith('{"progress"'):
                        with contextlib.suppress(ValueError):
                            prog.append(json.loads(line))
                steps = [x["s"] for x in prog if x["progress"] == "decode" and x.get("timed")]
                lrow.update({"load_s": next((x["s"] for x in prog if x["progress"] == "load"), None),
                             "prefills_done": sum(x["progress"] == "prefill" for x in prog),
                             "decode_step_s": steps, "steps_done": len(steps),
                             "tpot_s_partial": sum(steps) / len(steps) if steps else None})
                lrow["error"] = f"timed out after {pc['llama_timeout_s']} s (logs/{tag}.log)"
            else:
                lrow["error"] = ("OOM-killed under the cap" if lrow["oom"] else f"exit {r['rc']}") + f" (logs/{tag}.log)"
            bl.log(f"m: cap {cap / bl.GIB:.2f} GiB: llama.cpp " + (f"tpot {lrow['tpot_s']:.3f} s" if lrow["ok"]
                                                                   else lrow["error"]))
        row["llama"] = lrow
        if z["ok"] and lrow["ok"]:
            row["ratio"] = z["tpot_s"] / lrow["tpot_s"]
        elif z["ok"] and lrow.get("tpot_s_partial"):
            row["ratio_partial"] = z["tpot_s"] / lrow["tpot_s_partial"]
        zp = row.get("zipmoe_prefetch") or {}
        if zp.get("ok") and lrow["ok"]:
            row["ratio_prefetch"] = zp["tpot_s"] / lrow["tpot_s"]
        elif zp.get("ok") and lrow.get("tpot_s_partial"):
            row["ratio_prefetch_partial"] = zp["tpot_s"] / lrow["tpot_s_partial"]
        rows.append(row)
    out["rows"] = rows
    return out


def cold_zipmoe(s, m, pc, cap, budget, system, ids_s, resident_ids):
    """One cold zipmoe run of (m)'s sweep under `cap` (--preload, like llama.cpp paging its GGUF in)."""
    n = pc["cold_tokens"]
    z_preload = None
    model_dir, extra = s.system_args(m, system)
    tag = f"m-cold-{system.replace('+', '-')}-{cap // bl.MIB}MiB"
    stats = os.path.join(s.out, "runs", tag + ".json")
    os.makedirs(os.path.dirname(stats), exist_ok=True)
    r = run_group(s, [s.zipmoe, "generate", "--model", model_dir, "--prompt-ids", ids_s, "--max-new-tokens",
                      str(n), "--ignore-eos", "--threads", str(s.threads), "--json", "--memory-budget",
                      str(budget), "--stats-json", stats, "--preload", *extra], tag + ".log", capped=True,
                  limit=cap, cold=True, timeout=pc["zipmoe_timeout_s"])
    j = last_json(r["stdout"]) if r["rc"] == 0 else None
    # --preload: like llama.cpp paging its GGUF in while loading, zipmoe fills its pools to the plan
    # before the request (counted in its TTFT, not its TPOT); the line says how long and how much.
    with contextlib.suppress(OSError):
        pm = re.search(r"I: preload: (\d+) experts .* in ([0-9.]+) s \(([0-9.]+) MiB read\)",
                       open(os.path.join(s.logs, tag + ".log")).read())
        if pm:
            z_preload = {"experts": int(pm.group(1)), "seconds": float(pm.group(2)), "read_mib": float(pm.group(3))}
    z = {"system": system, "budget_bytes": budget, "budget_pct": round(100 * budget / m["expert_bytes"], 1),
         "ok": j is not None, "preload": z_preload,
         "timed_out": r["timed_out"], "oom": r["oom_kills"] > 0, "peak_bytes": r["peak_bytes"],
         "wall_s": r["wall_s"], "others_cpu": r["others_cpu"], "major_faults": r["major_faults"],
         "minor_faults": r["minor_faults"], "sys_s": r["sys_s"], "user_s": r["user_s"]}
    if j:
        st = json.load(open(stats)) if os.path.exists(stats) else {}
        io = st.get("io") or {}
        pre = (st.get("prefill") or {}).get("io") or {}
        read = io.get("bytes_e", 0) + io.get("bytes_sm", 0)
        steps = max(1, len(j["generated_ids"]) - 1)
        z.update({"tpot_s": j["tpot_s"], "ttft_s": j["ttft_s"],
                  "hit_rate": (st.get("requests") or {}).get("hit_rate"), "read_bytes": read,
                  "decode_read_bytes_per_token": max(0, read - pre.get("bytes_e", 0) - pre.get("bytes_sm", 0)) / steps,
                  "generated_ids": j["generated_ids"], "arena_bytes": (st.get("arena") or {}).get("mapped_bytes"),
                  "decompress_s": (st.get("decode") or {}).get("seconds"), "io_s": io.get("seconds"),
                  "evictions": sum(p.get("evictions", 0) for p in (st.get("pools") or {}).values()),
                  "prefetch": st.get("prefetch"),
                  "same_tokens_as_resident": resident_ids is not None
                  and j["generated_ids"] == resident_ids[:len(j["generated_ids"])]})
        if resident_ids is not None and not z["same_tokens_as_resident"]:
            s.failures.append(tag)
    else:
        z["error"] = ("OOM-killed under the cap" if z["oom"] else f"exit {r['rc']}") + f" (logs/{tag}.log)"
    bl.log(f"m: cap {cap / bl.GIB:.2f} GiB: {system} budget {z['budget_pct']} %: "
           + (f"tpot {z['tpot_s']:.3f} s" if z["ok"] else z["error"]))
    return z


# ------------------------------------------------------------------ report

def report(rep):
    plt = rep.plt
    mj = load(rep.a.out, "m_llama_peer.json")
    rep.p("## (m) llama.cpp as a peer: decode floor, warm TPOT / prefill, peak RSS, cold TPOT vs cap", "")
    if not mj:
        rep.p("Not run.", "")
        return
    pc = mj["config"]
    fb = mj["floor_bytes"]
    best = mj.get("best") or {}
    z, l = best.get("zipmoe"), best.get("llama.cpp")
    rel = next((w.get("llama_cpp_release") for w in mj.get("warm", []) if w.get("llama_cpp_release")), None)
    disk = (rep.meta.get("disk") or {}).get("odirect_gbps_1m")
    rep.p(f"The peer: llama.cpp {rel or ''} (node-llama-cpp's prebuilt CPU build, `bench/llama_peer.mjs`) on a BF16 "
          f"GGUF of the same checkpoint ({gib(mj.get('gguf_bytes'))} GiB, `bench/gguf_writer.py`: the same BF16 "
          "bits, norms and routers widened to F32). Both get the same "
          f"{len(mj['prompt_ids'])} random prompt ids (seed {mj['seed']}) and `--threads {mj['threads']}`. "
          f"**Decode floor** = weight bytes one decode token reads / memory read bandwidth: "
          f"{fb['dense'] / MIB:.0f} MiB dense (attention, norms, shared experts, routers) + "
          f"{fb['routed'] / MIB:.0f} MiB routed (top-{fb['top_k']} of each of {fb['moe_layers']} MoE layers) + "
          f"{fb['lm_head'] / MIB:.0f} MiB lm_head{' (tied embedding)' if fb['tied_embeddings'] else ''} = "
          f"**{fb['total'] / GIB:.3f} GiB**; bandwidth = best of `membw_bench` (a 2 GiB float sum on "
          f"{mj['threads']} threads) before and after the warm runs: **{f3(mj.get('membw_gbps'), 1)} GB/s** "
          f"(median of its repetitions {f3(mj.get('membw_gbps_median'), 1)}), so the floor is "
          f"**{f3(mj.get('floor_s'), 4)} s**. Warm = every weight in the page cache (read in first; the "
          f"resident column says how much was), {1 + max((w['round'] for w in mj.get('warm') or []), default=-1)} "
          "interleaved rounds of zipmoe "
          f"(`executor_bench` on the HF directory, its weights copied into anonymous memory in the background "
          f"as `generate`/`serve` do by default, timed once the copy is done: {pc['zipmoe_reps']} timed "
          f"generations of {pc['warm_decode']} + 1 tokens after a warm-up) and llama.cpp ({pc['warm_decode']} timed decode "
          "steps after 2 untimed, prefill = median of 3 after a warm-up), best of each: the VM's bandwidth "
          "drifts between runs. *Other work meanwhile* = CPU time the rest of the VM used during the run "
          "(`/proc/stat` busy time minus the run's own, in cores); while a system's best run shared the cores "
          f"with more than {mj.get('others_max', 0.3)} cores of it, another round runs (at most "
          f"{pc.get('extra_rounds', 0)}).", "")
    mach = mj.get("machine") or {}
    if mach:
        rep.p(f"**This machine**: {mach.get('cpu') or 'an unnamed CPU'}, {mach.get('nproc')} cores seen, kernel-relevant "
              f"flags {', '.join(mach.get('flags') or []) or 'none'}; zipmoe's matrix kernel "
              f"`{(z or {}).get('kernel') or '?'}` (`ZIPMOE_GEMM_ISA` or the CPU's best) with GEMV prefetch "
              f"`{(z or {}).get('prefetch') or '?'}` (`ZIPMOE_GEMV_PREFETCH` or the CPU's default), llama.cpp's CPU variant "
              f"`{(l or {}).get('kernel') or '?'}` (the `libggml-cpu-*.so` it loaded). Ratios below use the best "
              "run of each; the medians over the interleaved rounds are in brackets.", "")
    if mj.get("llama_error"):
        rep.p(f"**llama.cpp could not run**: {mj['llama_error']}", "")
    rss = mj.get("rss") or {}
    sw = mj.get("sweep") or {}
    rows = sw.get("rows") or []
    vals = []  # (measure, target text, value text, met, why)

    def add(measure, target, value, ok, why=""):
        vals.append((measure, target, value, ok, why))
    eff = lambda t: fb["total"] / t / 1e9 if t else None  # noqa: E731  effective weight GB/s of a decode step
    if z and mj.get("floor_s"):
        # Each run against the floor of its own moment (the bandwidth measured right before it), median
        # over the rounds; older results: the best run against the best bandwidth.
        r = z.get("floor_ratio_median") or z["tpot_s"] / mj["floor_s"]
        why = ""
        if r > 1.2:
            lr = f"llama.cpp's {l['tpot_s'] / mj['floor_s']:.2f}× ({f3(eff(l['tpot_s']), 1)} GB/s)" if l else ""
            l_busy = l and (l.get("others_cpu") or 0) > OTHERS_MAX
            z_busy = (z.get("others_cpu") or 0) > OTHERS_MAX
            why = (f"zipmoe's step streams its {fb['total'] / GIB:.2f} GiB at {f3(eff(z['tpot_s']), 1)} GB/s, "
                   f"{mj['membw_gbps'] / eff(z['tpot_s']):.1f}× below what a plain {mj['threads']}-thread sum reads"
                   + (f"; its best run shared the cores with {z['others_cpu']:.2f} cores of other work" if z_busy
                      else "")
                   + ("" if not l else
                      f"; {lr} shared the cores too ({l['others_cpu']:.2f} cores of other work), so it tells "
                      "nothing about the machine here" if l_busy else
                      f"; {lr} is above the floor too: a decode step is more than its matrix products, whose "
                      "kernel alone reads about as fast as the floor's (kernels/bf16_gemm_tile.h PrefetchAhead); "
                      "the rest is the serial work between them (attention, norms, routing, sampling: a few "
                      "microseconds each, mostly first touches of memory the weight stream evicted; "
                      "docs/benchmarks.md \"(m) on other machines\")"
                      if l["tpot_s"] / mj["floor_s"] > 1.2 else
                      f"; {lr} comes closer, so the gap is zipmoe's kernels/threading, not the machine"))
        lf = f"; llama.cpp's {l['floor_ratio_median']:.2f}" if l and l.get("floor_ratio_median") else ""
        add("zipmoe warm TPOT / decode floor (median of each run over its moment's floor)" if z.get("floor_ratio_median")
            else "zipmoe warm TPOT / decode floor", "≤ 1.25",
            f"{r:.2f} (best run {f3(z['tpot_s'], 4)} s; floor at the best bandwidth {f3(mj['floor_s'], 4)} s{lf})",
            r <= 1.25, why)
    if z and l:
        r = z["tpot_s"] / l["tpot_s"]
        def busy(key):
            text = [f"{name}'s best run shared the cores with {b[key]:.2f} cores of other work"
                    for name, b in (("zipmoe", z), ("llama.cpp", l)) if (b.get(key) or 0) > 0.3]
            return f"; {', '.join(text)}" if text else ""
        med = (f"; medians {z['tpot_s_median'] / l['tpot_s_median']:.2f}" if z.get("tpot_s_median")
               and l.get("tpot_s_median") else "")
        if mj.get("tpot_ratio_median"):
            med += f"; round by round, median {mj['tpot_ratio_median']:.2f}"

        add("zipmoe / llama.cpp warm TPOT", "≤ 0.9",
            f"{r:.2f} ({f3(z['tpot_s'], 4)} vs {f3(l['tpot_s'], 4)} s{busy('others_cpu')}{med})", r <= 0.9,
            "" if r <= 0.9 else f"same bytes per step, zipmoe streams them at {f3(eff(z['tpot_s']), 1)} GB/s vs "
            f"llama.cpp's {f3(eff(l['tpot_s']), 1)} GB/s")
        r = z["prefill_tokens_per_s"] / l["prefill_tokens_per_s"]

        def best_prefill_membw(sysname):
            """membw_bench's reading just before `sysname`'s fastest warm prefill (None if not measured)."""
            ok = [w for w in mj.get("warm") or [] if w["system"] == sysname and w.get("ok")]
            return max(ok, key=lambda w: w["prefill_tokens_per_s"]).get("membw_gbps") if ok else None

        # ≈ FLOPs of the prefill: 2 per BF16 weight of what every prompt token uses (dense + top-k experts),
        # plus lm_head once (the last position's logits).
        n = len(mj["prompt_ids"])
        flops = 2 * ((fb["dense"] + fb["routed"]) * n + fb["lm_head"]) / 2
        gz, gl = flops * z["prefill_tokens_per_s"] / n / 1e9, flops * l["prefill_tokens_per_s"] / n / 1e9
        med = (f"; medians {z['prefill_tokens_per_s_median'] / l['prefill_tokens_per_s_median']:.2f}"
               if z.get("prefill_tokens_per_s_median") and l.get("prefill_tokens_per_s_median") else "")
        add("zipmoe / llama.cpp warm prefill tokens/s", "≥ 1.2",
            f"{r:.2f} ({z['prefill_tokens_per_s']:.1f} vs {l['prefill_tokens_per_s']:.1f} tok/s"
            f"{busy('prefill_others_cpu')}{med})", r >= 1.2,
            "" if r >= 1.2 else
            f"a {n}-token prefill is a GEMM over ~{flops / 1e9:.1f} GFLOP; zipmoe's reaches ≈ {gz:.1f} GFLOP/s on "
            f"{mj['threads']} cores, llama.cpp's ≈ {gl:.1f} GFLOP/s. It also streams most routed experts once "
            "(each sees a few of the tokens), so it moves with the memory's speed: `membw_bench` read "
            f"{f3(best_prefill_membw('zipmoe'), 1)} GB/s just before zipmoe's best prefill, "
            f"{f3(best_prefill_membw('llama.cpp'), 1)} GB/s before llama.cpp's")
    if rss.get("peak_rss_bytes"):
        r = rss["peak_rss_bytes"] / rss["allowed_bytes"]
        add("peak RSS, all-resident `zipmoe generate` / (checkpoint × 1.05 + 512 MiB)", "≤ 1",
            f"{r:.2f} ({gib(rss['peak_rss_bytes'])} / {gib(rss['allowed_bytes'])} GiB)", r <= 1,
            "" if r <= 1 else f"{(rss['peak_rss_bytes'] - rss['weights_bytes']) / MIB:.0f} MiB above the "
            f"{gib(rss['weights_bytes'])} GiB of mapped checkpoint: torch, activations, KV cache and any copies")
    variants = [("zipmoe", rows, mj.get("cold50_over_warm"))]
    pf = pc.get("sweep_prefetch")
    if pf and any(x.get("zipmoe_prefetch") for x in rows):
        variants.append((f"zipmoe --prefetch {pf}", [prefetch_view(x) for x in rows],
                         mj.get("cold50_over_warm_prefetch")))
    for vname, rows_v, cold50 in variants:
        r50 = next((x for x in rows_v if (x.get("zipmoe") or {}).get("budget_pct") == 50 and x["zipmoe"].get("ok")), None)
        if cold50 is not None and r50:
            r = cold50
            zc = r50["zipmoe"]
            io = zc.get("decode_read_bytes_per_token")
            why = ""
            if r > 1.5:
                why = (f"cold and capped, zipmoe's hit rate is {f3(zc.get('hit_rate'))}: it reads "
                       f"{(io or 0) / MIB:.0f} MiB of compressed experts per decode step"
                       + (f" (≥ {io / (disk * 1e9):.3f} s at the disk's {disk:.2f} GB/s)" if io and disk else "")
                       + " and decompresses them on its decompression worker, on the same 2 cores as the expert math"
                       + (f" ({zc['decompress_s']:.1f} s of decompression and {f3(zc.get('sys_s'), 1)} s of kernel CPU "
                          "over the run, prefill included)" if zc.get("decompress_s") is not None else "")
                       + f"; a single cold request of {sw.get('tokens')} tokens is mostly first touches"
                       + (f"; other work took {zc['others_cpu']:.2f} cores during the run"
                          if (zc.get("others_cpu") or 0) > 0.3 else ""))
            add(f"{vname} cold TPOT at 50 % budget (capped) / warm TPOT", "≤ 1.5",
                f"{r:.2f} ({f3(zc['tpot_s'], 3)} / {f3(z['tpot_s'], 4)} s)", r <= 1.5, why)
        both = [x for x in rows_v if x.get("zipmoe", {}).get("ok") and not x["llama"].get("skipped")]
        verdicts = [(x, *cap_verdict(x, sw)) for x in both]
        judged = [(x, text, met, r) for x, text, met, r in verdicts if met is not None]
        if judged:
            num = [(r, x) for x, _, _, r in judged if r is not None]
            mx = max(num, key=lambda t: t[0]) if num else None
            n_to = sum(1 for x in both if x["llama"].get("timed_out"))
            text = (f"max {mx[0]:.2f} (at {gib(mx[1]['cap_bytes'])} GiB)" if mx else "–") + \
                (f"; llama.cpp timed out at {n_to} of {len(both)} caps" if n_to else "")
            ok = all(met for _, _, met, _ in judged)
            worst = max((t for t in judged if not t[2] and t[3] is not None), key=lambda t: t[3], default=None)
            add(f"{vname} / llama.cpp cold TPOT, every cap", "≤ 1", text, ok,
                cap_why(worst[0], rows_v, sw) if worst and not ok else "")
        half = [(x, text, met, r) for x, text, met, r in verdicts
                if x.get("llama_holds") is not None and x["llama_holds"] <= 0.5]
        if half:
            hv = [(x, text, r is not None and r <= 0.25 or (r is None and met)) for x, text, met, r in half
                  if met is not None]
            ok = bool(hv) and all(m for _, _, m in hv)
            worst = max(((x, r) for x, _, _, r in half if r is not None and r > 0.25), key=lambda t: t[1],
                        default=None)
            add(f"{vname} / llama.cpp cold TPOT where llama.cpp holds ≤ half its GGUF", "≤ 0.25",
                "; ".join(f"{text} at {gib(x['cap_bytes'])} GiB" for x, text, _, _ in half), ok,
                cap_why(worst[0], rows_v, sw) if worst else "")
    if vals:
        rep.p("| measure | target | measured | met? | why missed (from this run's data) |", "|---|---|---|---|---|")
        for measure, target, value, ok, why in vals:
            rep.p(f"| {measure} | {target} | {value} | {'yes' if ok else '**no**'} | {why if not ok else ''} |")
        rep.p("")
    warm = mj.get("warm") or []
    if warm:
        rep.p("| round | system | TPOT s | prefill tok/s | weights resident | other work meanwhile (cores) | "
              "group peak GiB (own memory) |", "|---|---|---|---|---|---|---|")
        for w in warm:
            res = "–" if w.get("resident") is None else f"{w['resident']:.0%}"
            if w.get("ok"):
                rep.p(f"| {w['round'] + 1} | {w['system']} | {f3(w['tpot_s'], 4)} | {w['prefill_tokens_per_s']:.1f} | "
                      f"{res} | {f3(w.get('others_cpu'), 2)} | {gib(w.get('peak_bytes'))} |")
            else:
                rep.p(f"| {w['round'] + 1} | {w['system']} | failed: {w.get('error', '')} | | {res} | | |")
        base = [w for w in warm if w["system"] == "zipmoe" and w.get("ok")]
        variants = sorted({w["system"] for w in warm if w["system"].startswith("zipmoe (")})
        if variants:
            rep.p("")
        for variant in variants:
            runs = [w for w in warm if w["system"] == variant and w.get("ok")]
            if runs and base:
                t = statistics.median(w["tpot_s"] for w in runs) / statistics.median(w["tpot_s"] for w in base)
                pf = (statistics.median(w["prefill_tokens_per_s"] for w in runs) /
                      statistics.median(w["prefill_tokens_per_s"] for w in base))
                if variant in {f"zipmoe ({isa})" for isa, _, _ in CPU_CLASSES}:
                    continue  # reported with its llama.cpp pair below
                if variant == f"zipmoe ({MMAP})":
                    rep.p(f"{variant}, the weights kept in the files' memory maps (the default copies them into "
                          f"anonymous memory in the background; not judged by the targets): TPOT {t:.2f}x and "
                          f"prefill {pf:.2f}x the default's (medians).")
                else:
                    rep.p(f"{variant}, the opt-in kernel variant (its bits differ from the default's, so it is not "
                          f"judged by the targets): TPOT {t:.2f}x and prefill {pf:.2f}x the default kernel's (medians).")
        for isa, variant, label in CPU_CLASSES:
            la = [w for w in warm if w["system"] == f"llama.cpp ({variant})" and w.get("ok")]
            za = [w for w in warm if w["system"] == f"zipmoe ({isa})" and w.get("ok")] or [
                w for w in base if w.get("kernel") == isa]
            if not (za and la):
                continue
            pairs = [(z, l) for z in za for l in la if z["round"] == l["round"]]
            per_round = ", ".join(f"{z['tpot_s'] / l['tpot_s']:.2f}" for z, l in pairs)
            t = statistics.median(w["tpot_s"] for w in za) / statistics.median(w["tpot_s"] for w in la)
            pf = (statistics.median(w["prefill_tokens_per_s"] for w in za) /
                  statistics.median(w["prefill_tokens_per_s"] for w in la))
            rep.p(f"**{label} class on this machine** (that class's kernels with this machine's memory; not judged "
                  f"by the targets): zipmoe's `{isa}` kernel (the default's bits) against llama.cpp with only its "
                  f"`{variant}` CPU backend: TPOT {t:.2f}x llama.cpp's (medians; by round {per_round}), prefill "
                  f"{pf:.2f}x its speed.", "")
        bws = ", ".join(f"{b['gbps']:.1f}" + (f" (other work meanwhile: {b['others_cpu']:.2f} cores)"
                                              if b.get("others_cpu") is not None else "")
                        for b in mj.get("membw") or [])
        rep.p("", f"membw_bench best per run: {bws} GB/s. " + (
            f"All-resident `zipmoe generate` (the RSS run): TPOT {f3(rss.get('tpot_s'), 4)} s, peak RSS "
            f"{gib(rss.get('peak_rss_bytes'))} GiB for a {gib(rss.get('weights_bytes'))} GiB checkpoint (RSS "
            "counts the mapped checkpoint pages)." if rss.get("peak_rss_bytes") else ""), "")
    other_archs_report(rep, mj)
    if sw.get("skipped"):
        rep.p(f"Cold sweep skipped: {sw['skipped']}.", "")
        return
    if not rows:
        return
    rep.p(f"**Cold TPOT vs cap.** Both systems run in the cgroup at each cap with the page cache dropped first, "
          f"{sw['tokens']} new tokens (llama.cpp: its prefill twice, then {sw['tokens'] - 1} timed decode steps). "
          f"zipmoe runs the compressed directory with `--memory-budget` = cap − its overhead "
          f"({gib(sw['zipmoe_overhead_bytes'])} GiB, the calibration above), at least its minimum of one staging "
          f"slot ({(sw.get('zipmoe_min_budget_bytes') or 0) / MIB:.1f} MiB), and `--preload --plan-trace` (the "
          f"warm-up trace above): before the request it fills its pools to the plan, the experts the trace "
          f"selects most placed by rank (\"its preload\": seconds and MiB read; before the request, so in neither "
          f"its TTFT nor its TPOT), as llama.cpp reads its model while loading (\"its load\"). llama.cpp maps the GGUF and pages "
          f"through the capped page cache; its overhead ({gib(sw.get('llama_overhead_bytes'))} GiB) is its warm "
          f"runs' own group peak ({gib(sw.get('llama_warm_peak_bytes'))} GiB: node, buffers, KV) + 256 MiB, so "
          "\"holds\" = (cap − that) / GGUF size. A llama.cpp run longer than "
          f"{sw['llama_timeout_s']} s is stopped and counted as timed out.", "")
    if plt:
        plt.figure(figsize=(6.4, 3.6))
        series = [("zipmoe", "zipmoe", COLORS["zipmoe"]), ("llama", "llama.cpp", "C5")]
        if pc.get("sweep_prefetch"):
            series.insert(1, ("zipmoe_prefetch", f"zipmoe --prefetch {pc['sweep_prefetch']}", "C2"))
        for key, name, color in series:
            pts = sorted((x["cap_bytes"] / GIB, x[key]["tpot_s"]) for x in rows if (x.get(key) or {}).get("ok"))
            if pts:
                plt.plot([a for a, _ in pts], [b for _, b in pts], "o-", color=color, label=name)
        part = [(x["cap_bytes"] / GIB, x["llama"]["tpot_s_partial"]) for x in rows
                if not x["llama"].get("ok") and x["llama"].get("tpot_s_partial")]
        if part:
            plt.scatter([a for a, _ in part], [b for _, b in part], marker="o", facecolors="none", color="C5",
                        s=50, label=f"llama.cpp, timed out ({sw['llama_timeout_s']} s): its finished steps")
        finite = [x[k]["tpot_s"] for x in rows for k in ("zipmoe", "llama") if x[k].get("ok")] + [b for _, b in part]
        top = max(finite) * 2 if finite else 1
        lost = [x["cap_bytes"] / GIB for x in rows if not x["llama"].get("ok") and not x["llama"].get("skipped")
                and not x["llama"].get("tpot_s_partial")]
        if lost:
            plt.scatter(lost, [top] * len(lost), marker="x", color="C5", s=60,
                        label=f"llama.cpp: no decode step in {sw['llama_timeout_s']} s, or failed")
        if z:
            plt.axhline(z["tpot_s"], color=COLORS["zipmoe"], ls=":", lw=1, label="zipmoe warm")
        if mj.get("floor_s"):
            plt.axhline(mj["floor_s"], color="k", ls="--", lw=1, label="decode floor (bytes / bandwidth)")
        plt.yscale("log")
        plt.xlabel("memory cap (GiB): RSS + page cache of the run")
        plt.ylabel("TPOT (s), log")
        plt.grid(alpha=0.3, which="both")
        plt.legend(fontsize=7)
        plt.title(f"qwen2_moe mini, cold, {sw['tokens']} tokens: TPOT vs cap", fontsize=9)
        rep.fig("m_llama_peer_tpot_vs_cap.png", "TPOT vs memory cap, zipmoe and llama.cpp")
    pf = pc.get("sweep_prefetch")
    rep.p("| cap GiB | which cap | llama.cpp holds | zipmoe budget | zipmoe TPOT s | TTFT s | its preload s (MiB) | "
          "hit rate | read MiB / step | llama.cpp TPOT s | its load s | its major faults | other work z / l (cores) | "
          "zipmoe / llama.cpp | target | met? |"
          + (f" zipmoe --prefetch {pf}: TPOT s (prefetch accuracy) | its ratio | met? |" if pf else ""),
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if pf else ""))
    for x in rows:
        zc, lc = x["zipmoe"], x["llama"]
        target = 0.25 if x.get("llama_holds") is not None and x["llama_holds"] <= 0.5 else 1.0
        if zc.get("ok"):
            pre = x.get("zipmoe_preload")
            pre_t = f"{pre['seconds']:.1f} ({pre['read_mib']:.0f})" if pre else "–"
            zt = f"{f3(zc['tpot_s'])} | {f3(zc.get('ttft_s'), 2)} | {pre_t} | {f3(zc.get('hit_rate'))} | " \
                 f"{(zc.get('decode_read_bytes_per_token') or 0) / MIB:.0f}"
        else:
            zt = f"{zc.get('error', 'failed')} | | | |"
        if lc.get("ok"):
            lt = f3(lc["tpot_s"])
        elif lc.get("skipped"):
            lt = "not run at this cap"
        elif lc.get("timed_out"):
            lt = (f"timed out ({sw['llama_timeout_s']} s): {lc['steps_done']} of {sw['tokens'] - 1} steps, mean "
                  f"{f3(lc['tpot_s_partial'])}" if lc.get("tpot_s_partial") else
                  f"timed out ({sw['llama_timeout_s']} s) after {lc.get('prefills_done', 0)} of 2 prefills, "
                  "no decode step")
        else:
            lt = (lc.get("error") or "failed").split(" (")[0]
        ratio, met = "–", "–"
        if zc.get("ok") and not lc.get("skipped"):
            text, ok, r = cap_verdict(x, sw)
            ratio = text.split(" (")[0] if r is not None else text
            if r is not None:
                met = "yes" if r <= target else "**no**"
            elif ok is not None:
                met = "yes" if ok else "**no**"
        holds = "–" if x.get("llama_holds") is None else f"{max(0.0, x['llama_holds']):.0%}"
        extra = ""
        if pf:
            v = prefetch_view(x)
            zp = v["zipmoe"]
            acc = (zp.get("prefetch") or {}).get("accuracy")
            pt = f"{f3(zp['tpot_s'])} ({f3(acc, 2)})" if zp.get("ok") else zp.get("error", "failed").split(" (")[0]
            pr, pm = "–", "–"
            if zp.get("ok") and not lc.get("skipped"):
                text, ok, r = cap_verdict(v, sw)
                pr = text.split(" (")[0] if r is not None else text
                pm = ("yes" if r <= target else "**no**") if r is not None else \
                    ("–" if ok is None else "yes" if ok else "**no**")
            extra = f" {pt} | {pr} | {pm} |"
        rep.p(f"| {gib(x['cap_bytes'])} | {x['label']} | {holds} | {zc.get('budget_pct')} % | {zt} | {lt} | "
              f"{f3(lc.get('load_s'), 1)} | {lc.get('major_faults', '–')} | {f3(zc.get('others_cpu'), 2)} / "
              f"{f3(lc.get('others_cpu'), 2)} | {ratio} | ≤ {target} | {met} |{extra}")
    diff = [x for x in rows if x["zipmoe"].get("ok") and x["zipmoe"].get("same_tokens_as_resident") is False]
    rep.p("", "zipmoe's tokens in every cold run " + (
        "equal the all-resident run's." if not diff else
        f"**differ from the all-resident run's at {len(diff)} cap(s)**.") + " llama.cpp computes in its own order "
          "and precision (BF16 activations in its matrix products), so its tokens may drift from zipmoe's after a "
          "few steps; `bench/peer_check.py` checks that the two carry the same model.", "")


def other_archs_report(rep, mj):
    """The held-out architectures' warm rows (OTHER_ARCHS): one line per architecture, ratios of the best runs
    with the medians over the rounds in brackets; informative (the targets above are the qwen2_moe mini's)."""
    archs = mj.get("other_archs") or []
    if not archs:
        return
    rep.p(f"**Held-out architectures, warm** (`--full`: {', '.join(a['arch'] for a in archs)}; their synthetic "
          "minis, same seed / skew, same prompt length and rounds interleaved as above, each judged against its "
          "own decode floor at its run's bandwidth). Not the targets above, which are the qwen2_moe mini's: these "
          "rows show where the same kernels stand on other expert shapes. Where llama.cpp is itself near the "
          "floor (coarse experts), no system can be 10 % faster than it.", "")
    rep.p("| architecture | experts (top-k) × rows | GiB a decode token reads | zipmoe TPOT s | llama.cpp TPOT s | "
          "TPOT ratio | zipmoe / floor | llama.cpp / floor | prefill tok/s zipmoe vs llama.cpp | prefill ratio |",
          "|---|---|---|---|---|---|---|---|---|---|")
    for a in archs:
        if a.get("skipped") or a.get("error"):
            rep.p(f"| {a['arch']} | {'skipped: ' + a['skipped'] if a.get('skipped') else 'failed: ' + a['error']} "
                  "| | | | | | | | |")
            continue
        b = a.get("best") or {}
        z, ll = b.get("zipmoe"), b.get("llama.cpp")
        sh = a["shape"]
        shape = f"{sh.get('experts')} ({sh.get('num_experts_per_tok')}) × {sh.get('expert_rows')}"
        fr = lambda x: f"{x['floor_ratio_median']:.2f}" if x and x.get("floor_ratio_median") else "–"  # noqa: E731
        tp = lambda x: (f"{x['tpot_s']:.4f} ({x['tpot_s_median']:.4f})" + (  # noqa: E731
            f", shared the cores with {x['others_cpu']:.2f} cores of other work"
            if (x.get("others_cpu") or 0) > OTHERS_MAX else "")) if x else "failed"
        if z and ll:
            tr = f"**{z['tpot_s'] / ll['tpot_s']:.2f}** ({z['tpot_s_median'] / ll['tpot_s_median']:.2f})"
            pr = (f"**{z['prefill_tokens_per_s'] / ll['prefill_tokens_per_s']:.2f}** "
                  f"({z['prefill_tokens_per_s_median'] / ll['prefill_tokens_per_s_median']:.2f})")
            pf = f"{z['prefill_tokens_per_s']:.1f} vs {ll['prefill_tokens_per_s']:.1f}"
        else:
            tr = pr = "–"
            pf = f"{z['prefill_tokens_per_s']:.1f} vs –" if z else "–"
        rep.p(f"| {a['arch']} | {shape} | {a['floor_bytes']['total'] / GIB:.3f} | {tp(z)} | {tp(ll)} | {tr} | "
              f"{fr(z)} | {fr(ll)} | {pf} | {pr} |")
    rep.p("")


def cap_verdict(x, sw):
    """(text, met ≤ 1 or None when unknown, numeric ratio or None) of one cap of (m)'s sweep."""
    z, lc = x["zipmoe"], x["llama"]
    if x.get("ratio") is not None:
        return f"{x['ratio']:.2f}", x["ratio"] <= 1.0, x["ratio"]
    if lc.get("timed_out"):
        if x.get("ratio_partial") is not None:
            return (f"≈ {x['ratio_partial']:.2f} (llama.cpp timed out; mean of its {lc['steps_done']} finished "
                    "steps)", x["ratio_partial"] <= 1.0, x["ratio_partial"])
        if z.get("wall_s") is not None and z["wall_s"] < sw["llama_timeout_s"]:
            return (f"llama.cpp finished no decode step in {sw['llama_timeout_s']} s (zipmoe's whole run: "
                    f"{z['wall_s']:.0f} s)", True, None)
        return f"llama.cpp timed out after {sw['llama_timeout_s']} s", None, None
    if lc.get("oom"):
        return "llama.cpp OOM-killed under the cap", True, None
    return "llama.cpp failed", None, None


def prefetch_view(x):
    """A row of (m)'s sweep as seen by its prefetching zipmoe run (zipmoe_prefetch in place of zipmoe)."""
    zp = x.get("zipmoe_prefetch") or {"ok": False, "error": "not run"}
    return dict(x, zipmoe=zp, ratio=x.get("ratio_prefetch"), ratio_partial=x.get("ratio_prefetch_partial"),
                zipmoe_preload=zp.get("preload"))


def cap_why(x, rows, sw):
    """Why zipmoe lost to llama.cpp at one cap of (m)'s sweep, from the two runs' counters."""
    xl, xz = x["llama"], x["zipmoe"]
    tpot_l = xl.get("tpot_s") or xl.get("tpot_s_partial")
    why = (f"at {gib(x['cap_bytes'])} GiB llama.cpp holds {max(0.0, x['llama_holds']):.0%} of its GGUF"
           + (f": it pages the file in while loading ({f3(xl.get('load_s'), 1)} s, not part of its TPOT) and then "
              f"decodes from memory ({xl.get('major_faults')} major faults in the whole run, {f3(tpot_l)} s per "
              "step)" if x["llama_holds"] >= 0.95 else
              f" and pages ({xl.get('major_faults')} major faults, {f3(tpot_l)} s per step)")
           + (f", while zipmoe at a {xz['budget_pct']:.0f} % budget fills its cache on demand: hit rate "
              f"{f3(xz.get('hit_rate'))}, {(xz.get('decode_read_bytes_per_token') or 0) / MIB:.0f} MiB of "
              f"compressed experts read, decoded and recovered per decode step (a cold {sw.get('tokens')}-token "
              "request)" if not x.get("zipmoe_preload") else
              f"; zipmoe at a {xz['budget_pct']:.0f} % budget preloaded {x['zipmoe_preload']['experts']} experts "
              f"({x['zipmoe_preload']['read_mib']:.0f} MiB in {x['zipmoe_preload']['seconds']:.1f} s, before the "
              f"request) and then hit {f3(xz.get('hit_rate'))} of its lookups, reading "
              f"{(xz.get('decode_read_bytes_per_token') or 0) / MIB:.0f} MiB per decode step, so I/O does not "
              f"explain its TPOT ({f3(xz['tpot_s'])} s): its run also took {f3(xz.get('sys_s'), 1)} s of kernel "
              f"CPU and {(xz.get('minor_faults') or 0) / 1e3:.0f}k minor faults (first touches of the arena while "
              "preloading, in the same process), and what else slows its decode near the cap is not in this "
              "run's counters"))
    others = [y["zipmoe"] for y in rows if y is not x and y["zipmoe"].get("ok") and y["zipmoe"].get("minor_faults")]
    ref = min(others, key=lambda z: z["tpot_s"], default=None)
    if ref and xz.get("evictions") == 0 and (xz.get("minor_faults") or 0) > ref["minor_faults"] and \
            xz["tpot_s"] > ref["tpot_s"]:
        cap_ref = next(y["cap_bytes"] for y in rows if y["zipmoe"] is ref)
        why += (f". Its TPOT is also {xz['tpot_s'] / ref['tpot_s']:.1f}× its own at {gib(cap_ref)} GiB "
                f"({f3(ref['tpot_s'])} s): with a pool that never evicts (0 evictions), every expert placed during "
                "decode lands on expert-arena pages touched for the first time: "
                f"{xz['minor_faults'] / 1e3:.0f}k minor page faults and {f3(xz.get('sys_s'), 1)} s of kernel CPU "
                f"in the run, vs {ref['minor_faults'] / 1e3:.0f}k and {f3(ref.get('sys_s'), 1)} s there "
                f"({ref.get('evictions')} evictions: decode reuses evicted slots)")
    if (xz.get("others_cpu") or 0) > 0.3:
        why += f"; other work took {xz['others_cpu']:.2f} cores during zipmoe's run"
    return why
