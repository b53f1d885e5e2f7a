"""Experiment (m) of bench/suite.py: llama.cpp as a peer (GGUF of the same weights), the memory-bandwidth
decode floor, peak RSS and cold TPOT vs memory cap for both, run in cgroup memory groups."""
import contextlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import benchlib as bl
from suite_config import BENCH_DIR, OTHERS_MAX, PEER_SEED, cpu_busy_s, decode_bytes_per_token, safetensors_tensors

# CPU flags that decide which matrix kernels a system can run (ours and llama.cpp's variants).
KERNEL_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                "amx_tile", "amx_bf16", "amx_int8", "avx_vnni", "asimd", "bf16", "i8mm", "sve", "sve2")


def cpu_description():
    """The CPU model, its core count and which of KERNEL_FLAGS it has (bench (m) reports it per machine)."""
    model, flags = bl.cpu_model_and_flags()
    return {"cpu": model, "nproc": os.cpu_count(), "flags": [f for f in KERNEL_FLAGS if f in flags]}


class PeerExperiments:
    """Methods of Suite (bench/suite.py); self.a, self.cfg, self.meta, self.zm, self.run, ... as set up there."""

    def run_group(self, cmd, log, capped=False, limit=None, cold=False, timeout=None):
        """Runs `cmd` in its own session (optionally inside the cap with `limit`, after dropping the page cache
        when `cold`) and kills its whole process group after `timeout` s. Returns rc (124 on timeout, 127 when it
        cannot start), timed_out, wall_s, stdout, the child's max RSS, page faults and CPU times (wait4 rusage),
        others_cpu (CPU the rest of the machine used meanwhile, in cores: /proc/stat busy time minus the child's),
        and the group's peak / OOM kills."""
        dropped = bl.drop_caches() if cold else False
        enter = None
        use_cap = capped and self.cap.available
        if use_cap:
            self.cap.set_limit(limit)
            self.cap.reset_peak()
            enter = self.cap.preexec()
        oom0 = self.cap.oom_kills() if use_cap else 0
        timed_out = False
        busy0 = cpu_busy_s()
        with open(os.path.join(self.logs, log), "w") as lf, tempfile.TemporaryFile() as out:
            lf.write(" ".join(cmd) + (f"   [cap {limit / bl.GIB:.2f} GiB]" if use_cap and limit else "") + "\n")
            lf.flush()
            t0 = time.time()
            try:
                p = subprocess.Popen(cmd, stdout=out, stderr=lf, preexec_fn=enter, start_new_session=True)
            except OSError as e:
                lf.write(f"cannot start: {e}\n")
                if use_cap:
                    self.cap.set_limit(None)
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
               "peak_bytes": self.cap.peak_bytes() if use_cap else None,
               "oom_kills": (self.cap.oom_kills() - oom0) if use_cap else 0, "limit_bytes": limit if use_cap else None}
        if use_cap:
            self.cap.set_limit(None)
        return res

    @staticmethod
    def last_json(text):
        for line in reversed(text.strip().splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    pass
        return None

    def peer_gguf(self, m):
        """The BF16 GGUF of the HF checkpoint (bench/gguf_writer.py), written once next to the model dirs."""
        path = m["root"] + ".gguf"
        if not os.path.exists(path):
            bl.log(f"gguf_writer {m['hf']} -> {path}")
            bl.run_cmd([sys.executable, os.path.join(BENCH_DIR, "gguf_writer.py"), m["hf"], "--out", path],
                       os.path.join(self.logs, "gguf_writer.log"), cold=False)
        return path

    def min_budget(self, m):
        """zipmoe's smallest --memory-budget (one staging slot), from the error it gives below it."""
        p = subprocess.run([self.zipmoe, "generate", "--model", m["zstd"], "--prompt-ids", "0", "--max-new-tokens",
                            "1", "--memory-budget", "1"], capture_output=True, text=True)
        hit = re.search(r"below the minimum (\d+) bytes", p.stdout + p.stderr)
        return int(hit.group(1)) if hit else None

    @staticmethod
    def page_in(paths):
        """Reads files into the page cache (from this process's cgroup, so a capped run that maps them later is
        not charged for them); returns {path: resident fraction} when fincore is installed."""
        for path in paths:
            with open(path, "rb") as f:
                while f.read(16 << 20):
                    pass
        return PeerExperiments.residency(paths)

    @staticmethod
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

    def membw(self, reps, log):
        r = self.run_group([os.path.join(self.a.bin, "membw_bench"), "--threads", str(self.threads), "--reps",
                            str(reps)], log, timeout=300)
        j = self.last_json(r["stdout"]) if r["rc"] == 0 else None
        if j:
            j["others_cpu"] = r["others_cpu"]
            bl.log(f"m: memory read bandwidth {j['gbps']:.1f} GB/s best, {j['gbps_median']:.1f} median "
                   f"(others used {r['others_cpu']:.2f} cores)")
        return j

    def exp_m(self, m):
        """llama.cpp (node-llama-cpp, bench/llama_peer.mjs) on a BF16 GGUF of the same checkpoint.
        (1) decode floor = bytes one decode token reads / memory bandwidth (membw_bench, same run);
        (2) warm, all weights in the page cache, same prompt ids and threads: zipmoe (executor_bench on the HF
        dir) and llama.cpp interleaved `rounds` times, best of each; (3) peak RSS of an all-resident
        `zipmoe generate` (/usr/bin/time -f %M) vs checkpoint bytes × 1.05 + 512 MiB; (4) cold TPOT vs cap,
        both systems in the same cgroup limit with the page cache dropped before each run (zipmoe: the
        compressed dir, --memory-budget = cap - its overhead from calibrate()); (5) zipmoe's cold TPOT at 50 %
        over its warm TPOT."""
        pc = self.cfg["peer"]
        res = {"config": pc, "threads": self.threads, "seed": PEER_SEED, "others_max": OTHERS_MAX,
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
        open(os.path.join(self.logs, "install_peer.log"), "w").write(inst.stdout + inst.stderr)
        if inst.returncode != 0:
            res["llama_error"] = f"bench/install_peer.sh failed: {(inst.stdout + inst.stderr).strip()[-300:]}"
            bl.warn(f"m: {res['llama_error']}")
        else:
            try:
                gguf = self.peer_gguf(m)
                res["gguf_bytes"] = os.path.getsize(gguf)
            except bl.RunError as e:
                res["llama_error"] = f"bench/gguf_writer.py failed: {e.args[0][:300]}"
                bl.warn(f"m: {res['llama_error']}")
        llama_cmd = ["node", os.path.join(BENCH_DIR, "llama_peer.mjs"), "--model", gguf or "", "--threads",
                     str(self.threads), "--prompt-ids", ids_s]
        # (1) + (2): warm, interleaved; bandwidth measured before and after.
        bw = [self.membw(pc["membw_reps"], "membw-1.log")]
        mem = {}
        for line in open("/proc/meminfo"):
            if line.startswith(("MemTotal", "MemAvailable")):
                mem[line.split(":")[0]] = int(line.split()[1]) * 1024
        res["mem_available_bytes"] = mem.get("MemAvailable")
        t0 = time.time()
        res["resident_before"] = self.page_in(hf_files + ([gguf] if gguf else []))
        res["page_in_s"] = round(time.time() - t0, 1)
        warm = []

        def round_membw(name, i):
            """The bandwidth right before a run: the VM's drifts by 1.5x within minutes, so each run is judged
            against the floor of its own moment (issue 35 item 2)."""
            b = self.membw(2, f"membw-{name}-{i}.log")
            return b["gbps"] if b else None

        def warm_zipmoe(i):
            bw_now = round_membw("zipmoe", i)
            resid = self.residency(hf_files)
            r = self.run_group([os.path.join(self.a.bin, "executor_bench"), m["hf"], "--threads", str(self.threads),
                                "--prompt-ids", ids_s, "--decode-tokens", str(pc["warm_decode"]), "--reps",
                                str(pc["zipmoe_reps"])], f"m-warm-zipmoe-{i}.log", capped=True, limit=None,
                               timeout=600)
            reps = [(float(a), float(b), float(c)) for a, b, c in re.findall(
                r"rep \d+: ttft ([0-9.]+) s, tpot ([0-9.]+) s, prefill ([0-9.]+) tokens/s", r["stdout"])]
            isa = re.search(r"I: gemm isa (\w+)", r["stdout"])
            row = {"system": "zipmoe", "round": i, "ok": r["rc"] == 0 and bool(reps), "resident": resid,
                   "wall_s": r["wall_s"], "peak_bytes": r["peak_bytes"], "others_cpu": r["others_cpu"],
                   "kernel": isa.group(1) if isa else None, "membw_gbps": bw_now}
            if row["ok"]:
                row.update({"tpot_s": min(x[1] for x in reps), "prefill_tokens_per_s": max(x[2] for x in reps),
                            "reps": [{"ttft_s": a, "tpot_s": b, "prefill_tokens_per_s": c} for a, b, c in reps]})
                bl.log(f"m: warm zipmoe #{i}: tpot {row['tpot_s']:.4f} s, prefill {row['prefill_tokens_per_s']:.1f} "
                       f"tok/s (others used {r['others_cpu']:.2f} cores)")
            else:
                row["error"] = f"executor_bench exit {r['rc']} (logs/m-warm-zipmoe-{i}.log)"
                bl.warn(f"m: {row['error']}")
            warm.append(row)

        def warm_llama(i):
            bw_now = round_membw("llama", i)
            resid = self.residency([gguf])
            r = self.run_group(llama_cmd + ["--decode-tokens", str(pc["warm_decode"]), "--warmup-tokens", "2",
                                            "--prefill-reps", "3"], f"m-warm-llama-{i}.log", capped=True,
                               limit=None, timeout=600)
            j = self.last_json(r["stdout"]) if r["rc"] == 0 else None
            row = {"system": "llama.cpp", "round": i, "ok": j is not None, "resident": resid, "wall_s": r["wall_s"],
                   "peak_bytes": r["peak_bytes"], "others_cpu": r["others_cpu"], "membw_gbps": bw_now}
            if j:
                row.update({k: j.get(k) for k in ("tpot_s", "prefill_tokens_per_s", "prefill_s", "load_s",
                                                  "decode_step_s", "generated_ids", "llama_cpp_release")})
                row["kernel"] = j.get("cpu_variant")  # which libggml-cpu-<variant>.so it loaded
                bl.log(f"m: warm llama.cpp #{i}: tpot {row['tpot_s']:.4f} s, prefill "
                       f"{row['prefill_tokens_per_s']:.1f} tok/s (others used {r['others_cpu']:.2f} cores)")
            else:
                row["error"] = f"llama_peer.mjs exit {r['rc']} (logs/m-warm-llama-{i}.log)"
                bl.warn(f"m: {row['error']}")
            warm.append(row)

        def disturbed():
            """True while some system's best warm run shared the machine with > OTHERS_MAX cores of other work."""
            for sysname in ("zipmoe", "llama.cpp") if gguf else ("zipmoe",):
                ok = [w for w in warm if w["system"] == sysname and w["ok"]]
                if ok and min(ok, key=lambda w: w["tpot_s"])["others_cpu"] > OTHERS_MAX:
                    return True
            return False

        i = 0
        while i < pc["rounds"] or (i < pc["rounds"] + pc["extra_rounds"] and disturbed()):
            if i >= pc["rounds"]:
                bl.log("m: extra warm round: a best run shared the cores with other work")
            warm_zipmoe(i)
            if gguf:
                warm_llama(i)
            i += 1
        bw.append(self.membw(pc["membw_reps"], "membw-2.log"))
        bw = [b for b in bw if b]
        res["warm"] = warm
        res["membw"] = bw
        res["membw_gbps"] = max(b["gbps"] for b in bw) if bw else None
        res["membw_gbps_median"] = sorted(x for b in bw for x in b["gbps_runs"])[
            len([x for b in bw for x in b["gbps_runs"]]) // 2] if bw else None
        if res["membw_gbps"]:
            res["floor_s"] = res["floor_bytes"]["total"] / (res["membw_gbps"] * 1e9)
        best = {}
        for sysname in ("zipmoe", "llama.cpp"):
            ok = [w for w in warm if w["system"] == sysname and w["ok"]]
            if ok:
                fastest = min(ok, key=lambda w: w["tpot_s"])
                prefill = max(ok, key=lambda w: w["prefill_tokens_per_s"])
                best[sysname] = {"tpot_s": fastest["tpot_s"], "others_cpu": fastest["others_cpu"],
                                 "prefill_tokens_per_s": prefill["prefill_tokens_per_s"],
                                 "prefill_others_cpu": prefill["others_cpu"],
                                 "peak_bytes": max((w["peak_bytes"] or 0) for w in ok) or None,
                                 # medians over the interleaved rounds (the VM's bandwidth drifts: both)
                                 "tpot_s_median": statistics.median(w["tpot_s"] for w in ok),
                                 "prefill_tokens_per_s_median": statistics.median(w["prefill_tokens_per_s"] for w in ok),
                                 "kernel": next((w.get("kernel") for w in ok if w.get("kernel")), None)}
                # each run's TPOT over the floor at its own moment's bandwidth, and the per-round ratio
                floors = [w["tpot_s"] / (res["floor_bytes"]["total"] / (w["membw_gbps"] * 1e9)) for w in ok
                          if w.get("membw_gbps")]
                if floors:
                    best[sysname]["floor_ratio_median"] = statistics.median(floors)
                    best[sysname]["floor_ratio_min"] = min(floors)
        z_rounds = {w["round"]: w for w in warm if w["system"] == "zipmoe" and w["ok"]}
        l_rounds = {w["round"]: w for w in warm if w["system"] == "llama.cpp" and w["ok"]}
        paired = [z_rounds[k]["tpot_s"] / l_rounds[k]["tpot_s"] for k in z_rounds if k in l_rounds]
        if paired:
            res["tpot_ratio_per_round"] = paired
            res["tpot_ratio_median"] = statistics.median(paired)
        res["best"] = best
        # (3) peak RSS of an all-resident generate (warm), and the resident run's tokens for the cold runs.
        rss_file = os.path.join(self.out, "m-rss.txt")
        r = self.run_group(["/usr/bin/time", "-f", "%M", "-o", rss_file, self.zipmoe, "generate", "--model", m["hf"],
                            "--prompt-ids", ids_s, "--max-new-tokens", str(pc["cold_tokens"]), "--ignore-eos",
                            "--threads", str(self.threads), "--json"], "m-rss-generate.log", timeout=600)
        j = self.last_json(r["stdout"]) if r["rc"] == 0 else None
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
        res["sweep"] = self.peer_sweep(m, pc, res, gguf, llama_cmd, ids_s, resident_ids)
        zw = best.get("zipmoe")
        r50 = next((x for x in res["sweep"].get("rows", []) if x["zipmoe"].get("budget_pct") == 50
                    and x["zipmoe"].get("ok")), None)
        if zw and r50:
            res["cold50_over_warm"] = r50["zipmoe"]["tpot_s"] / zw["tpot_s"]
            if (r50.get("zipmoe_prefetch") or {}).get("ok"):
                res["cold50_over_warm_prefetch"] = r50["zipmoe_prefetch"]["tpot_s"] / zw["tpot_s"]
        self.save("m_llama_peer", res)

    def peer_sweep(self, m, pc, res, gguf, llama_cmd, ids_s, resident_ids):
        if not self.cap.available:
            return {"skipped": f"no memory cap: {self.cap.reason}"}
        if "overhead_bytes" not in m:
            return {"skipped": "zipmoe's overhead was not calibrated"}
        E, oz = m["expert_bytes"], m["overhead_bytes"]
        lw = [w["peak_bytes"] for w in res["warm"] if w["system"] == "llama.cpp" and w["ok"] and w["peak_bytes"]]
        slack = 256 * bl.MIB
        # llama.cpp's overhead: its warm runs' group peak (the GGUF was paged in outside the group, so the peak
        # is its own memory: node, llama.cpp's buffers, KV cache) + the same slack as zipmoe's, in 64 MiB steps.
        ol = ((max(lw) + slack) // (64 * bl.MIB) + 1) * 64 * bl.MIB if lw else None
        G = res.get("gguf_bytes")
        zmin = self.min_budget(m)
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
            row["zipmoe"] = z = self.cold_zipmoe(m, pc, cap, budget, "zipmoe", ids_s, resident_ids)
            if z.get("preload"):
                row["zipmoe_preload"] = z["preload"]
            if pc.get("sweep_prefetch"):
                row["zipmoe_prefetch"] = self.cold_zipmoe(m, pc, cap, budget, f"zipmoe+{pc['sweep_prefetch']}", ids_s,
                                                          resident_ids)
            lrow = {"ok": False, "skipped": True}
            if gguf and with_llama:
                tag = f"m-cold-llama-{cap // bl.MIB}MiB"
                r = self.run_group(llama_cmd + ["--decode-tokens", str(n - 1), "--warmup-tokens", "0", "--prefill-reps",
                                                "1", "--progress"], tag + ".log", capped=True, limit=cap, cold=True,
                                   timeout=pc["llama_timeout_s"])
                j = self.last_json(r["stdout"]) if r["rc"] == 0 else None
                lrow = {"ok": j is not None, "timed_out": r["timed_out"], "oom": r["oom_kills"] > 0,
                        "peak_bytes": r["peak_bytes"], "wall_s": r["wall_s"], "major_faults": r["major_faults"],
                        "minor_faults": r["minor_faults"], "sys_s": r["sys_s"], "others_cpu": r["others_cpu"]}
                if j:
                    lrow.update({k: j.get(k) for k in ("tpot_s", "prefill_s", "load_s", "decode_step_s", "generated_ids")})
                elif r["timed_out"]:
                    # What it finished before the limit (llama_peer.mjs --progress lines in its log).
                    prog = []
                    for line in open(os.path.join(self.logs, tag + ".log"), errors="replace"):
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

    def cold_zipmoe(self, m, pc, cap, budget, system, ids_s, resident_ids):
        """One cold zipmoe run of (m)'s sweep under `cap` (--preload, like llama.cpp paging its GGUF in)."""
        n = pc["cold_tokens"]
        z_preload = None
        model_dir, extra = self.system_args(m, system)
        tag = f"m-cold-{system.replace('+', '-')}-{cap // bl.MIB}MiB"
        stats = os.path.join(self.out, "runs", tag + ".json")
        os.makedirs(os.path.dirname(stats), exist_ok=True)
        r = self.run_group([self.zipmoe, "generate", "--model", model_dir, "--prompt-ids", ids_s, "--max-new-tokens",
                            str(n), "--ignore-eos", "--threads", str(self.threads), "--json", "--memory-budget",
                            str(budget), "--stats-json", stats, "--preload", *extra], tag + ".log", capped=True,
                           limit=cap, cold=True, timeout=pc["zipmoe_timeout_s"])
        j = self.last_json(r["stdout"]) if r["rc"] == 0 else None
        # --preload: like llama.cpp paging its GGUF in while loading, zipmoe fills its pools to the plan
        # before the request (counted in its TTFT, not its TPOT); the line says how long and how much.
        with contextlib.suppress(OSError):
            pm = re.search(r"I: preload: (\d+) experts .* in ([0-9.]+) s \(([0-9.]+) MiB read\)",
                           open(os.path.join(self.logs, tag + ".log")).read())
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
                self.failures.append(tag)
        else:
            z["error"] = ("OOM-killed under the cap" if z["oom"] else f"exit {r['rc']}") + f" (logs/{tag}.log)"
        bl.log(f"m: cap {cap / bl.GIB:.2f} GiB: {system} budget {z['budget_pct']} %: "
               + (f"tpot {z['tpot_s']:.3f} s" if z["ok"] else z["error"]))
        return z
