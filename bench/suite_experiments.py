"""Experiments (c), (r), (a), (b), (g), (f), (d), (e), deepseek and (i) of bench/suite.py."""
import json
import os
import re
import signal
import subprocess
import time

import benchlib as bl
from replay_vs_budget import make_trace
from suite_config import ABLATION, POLICIES


class CoreExperiments:
    """Methods of Suite (bench/suite.py); self.a, self.cfg, self.meta, self.zm, self.run, ... as set up there."""

    def exp_c(self, m):
        rows = []
        tokens = self.cfg["tokens"]
        for pct in self.cfg["budgets"]:
            for system in POLICIES if pct == 50 else self.cfg["c_systems_other_budgets"]:
                rows.append(self.run(m, system, pct, tokens))
            # Bytes read by the decode steps: the run's totals minus its counters at the first token
            # (--stats-json "prefill").
            z = self.rows[(m["arch"], m["preset"], "zipmoe", pct, tokens, 1)]
            bw = (self.meta.get("disk") or {}).get("odirect_gbps_1m")
            prefill = (z.get("stats") or {}).get("prefill")
            if z.get("ok") and prefill and bw:
                steps = max(1, (z["generated_tokens"] or tokens) - 1)
                z["prefill_read_bytes"] = prefill["io"]["bytes_e"] + prefill["io"]["bytes_sm"]
                decode_bytes = max(0, z["read_bytes"] - z["prefill_read_bytes"])
                z["decode_read_bytes_per_token"] = decode_bytes / steps
                z["physical_limit_s"] = decode_bytes / steps / (bw * 1e9)
        self.save(f"c_tpot_vs_budget_{m['arch']}", {"model": self.model_meta(m), "rows": [self.public(r) for r in rows]})

    def exp_r(self, m):
        """`zipmoe replay` (storage, cache, scheduler, decode, recovery; no model math): per step and MoE
        layer, top_k distinct experts from a Zipf(1.0) popularity over a per-layer permutation; each lease
        held 200 µs (a stand-in for GPU expert compute). The zipmoe plan is fitted to a trace of the same
        distribution drawn with another seed (bench/replay_vs_budget.py's generator)."""
        rc = self.cfg["replay"]
        info = m["inspect"]
        layers = [p["layer_id"] for p in info["per_layer"] if p["experts"] > 0]
        top_k = int(m["config"]["num_experts_per_tok"])
        trace = os.path.join(self.out, "replay-trace.jsonl")
        plan_trace = os.path.join(self.out, "replay-plan-trace.jsonl")
        make_trace(trace, layers, int(info["n_experts"]), top_k, rc["steps"], 1.0, seed=1)
        make_trace(plan_trace, layers, int(info["n_experts"]), top_k, rc["steps"], 1.0, seed=2)
        bw = (self.meta.get("disk") or {}).get("odirect_gbps_1m")
        rows = []
        for pct in rc.get("budgets", self.cfg["budgets"]):
            for system in rc["systems"]:
                _, extra = self.system_args(m, system)
                if "--plan-trace" in extra:  # the replay's own workload, not the generation's warm-up trace
                    i = extra.index("--plan-trace")
                    extra = extra[:i + 1] + [plan_trace] + extra[i + 2:]
                tag = f"replay-{system}-{pct}"
                stats = os.path.join(self.out, "runs", tag + ".json")
                os.makedirs(os.path.dirname(stats), exist_ok=True)
                row = {"system": system, "budget_pct": pct, "cap_bytes": self.cap_bytes(m, pct)}
                try:
                    r = self.zm("replay", "--model", m["zstd"], "--trace", trace, "--memory-budget",
                                str(m["expert_bytes"] * pct // 100), "--compute-us", "200", "--repeat",
                                str(rc["repeat"]), "--stats-json", stats, *extra, log=tag + ".log", cold=True,
                                capped=True, limit=self.cap_bytes(m, pct), timeout=1800)
                except bl.RunError as e:
                    row.update({"ok": False, "error": str(e.args[0])[:600], "oom": e.args[1]["oom_kills"] > 0})
                    rows.append(row)
                    continue
                j = json.load(open(stats))
                read = (j["io"]["bytes_e"] + j["io"]["bytes_sm"]) / max(1, j["steps"])
                row.update({"ok": True, "step_s": j["step_seconds"], "hit_rate": j["requests"].get("hit_rate"),
                            "read_bytes_per_step": read, "physical_limit_s": read / (bw * 1e9) if bw else None,
                            "makespan_over_bound": j.get("mean_makespan_over_bound"), "peak_bytes": r["peak_bytes"],
                            "layer_ratios": [l.get("mean_makespan_over_bound") for l in j.get("layers", [])
                                             if l.get("runs")]})
                bl.log(f"{tag}: {row['step_s'] * 1e3:.1f} ms/step, hit rate {row['hit_rate']}, "
                       f"{read / bl.MIB:.1f} MiB/step")
                rows.append(row)
        self.save(f"r_replay_vs_budget_{m['arch']}", {"zipf": 1.0, "compute_us": 200, "steps": rc["steps"],
                                                      "repeat": rc["repeat"], "rows": rows})

    def model_meta(self, m):
        keep = ("arch", "preset", "hf", "zstd", "expert_bytes", "overhead_bytes", "calibration", "prepare_s")
        out = {k: m[k] for k in keep if k in m}
        info = m["inspect"]
        out["inspect"] = {k: v for k, v in info.items() if k != "per_layer"}
        cfg = m.get("config") or {}
        out["config"] = {k: cfg[k] for k in ("model_type", "num_layers", "num_decoder_layers", "num_hidden_layers",
                                             "encoder_sparse_step", "decoder_sparse_step", "num_experts",
                                             "num_local_experts", "num_experts_per_tok", "expert_capacity",
                                             "torch_dtype") if k in cfg}
        return out

    def exp_a(self, m):
        p = subprocess.run([os.path.join(self.a.bin, "codec_bench"), "--sections=ratio", "--min_seconds=0.05"],
                           capture_output=True, text=True)
        open(os.path.join(self.logs, "codec_bench_ratio.log"), "w").write(p.stdout + p.stderr)
        rows = []
        for line in p.stdout.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 10 and cells[1] in ("zstd", "lz4", "none"):
                def num(x):
                    try:
                        return float(x.rstrip("%"))
                    except ValueError:
                        return None
                rows.append({"tensor": cells[0], "codec": cells[1], "level": cells[2], "k": cells[3],
                             "e_bits": num(cells[5]), "h_bits": num(cells[6]), "stored_pct": num(cells[7]),
                             "bound_pct": num(cells[8]), "compress_mbps": num(cells[9])})
        models = {f"{a}-{pr}": {k: v for k, v in mm["inspect"].items() if k != "per_layer"}
                  for (a, pr), mm in self.models.items()}
        self.save("a_ratio", {"codec_bench": rows, "models": models})

    def codec_bench(self, sections, log, extra=()):
        """Runs codec_bench and parses its decode-thread rows and read rows."""
        p = subprocess.run([os.path.join(self.a.bin, "codec_bench"), f"--sections={sections}",
                            f"--io_dir={self.a.models}", f"--io_mib={self.cfg['io_mib']}", "--min_seconds=0.2",
                            f"--threads={self.threads}", *extra], capture_output=True, text=True)
        open(os.path.join(self.logs, log), "w").write(p.stdout + p.stderr)
        decode, read = [], []
        num = re.compile(r"([0-9.]+) \(([0-9.]+)\)")
        for line in p.stdout.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 5 and cells[0].isdigit():
                k16, k4 = num.match(cells[1]), num.match(cells[3])
                decode.append({"threads": int(cells[0]), "k16_gbps": float(k16.group(1)) if k16 else None,
                               "k4_gbps": float(k4.group(1)) if k4 else None})
            elif len(cells) == 2 and cells[0].startswith(("O_DIRECT", "buffered")):
                g = num.match(cells[1])
                t = re.search(r"(\d+) thread", cells[0])
                read.append({"read": cells[0], "threads": int(t.group(1)) if t else 1,
                             "gbps": float(g.group(1)) if g else None})
        return decode, read

    def exp_b(self, m):
        decode, read = self.codec_bench("threads,io", "codec_bench_threads_io.log")
        # The same with the other side running concurrently on the same cores: decode while a loop of
        # O_DIRECT reads of the model's experts file runs, and O_DIRECT reads (dd) while a 1-thread
        # decode loop runs.
        experts = os.path.join(m["zstd"], max(os.listdir(m["zstd"]),
                                              key=lambda f: os.path.getsize(os.path.join(m["zstd"], f))))
        loop = subprocess.Popen(["bash", "-c", f"while :; do dd if='{experts}' of=/dev/null bs=1M count=1024 "
                                               "iflag=direct 2>/dev/null; done"], start_new_session=True)
        try:
            decode_busy, _ = self.codec_bench("threads", "codec_bench_threads_with_reads.log")
        finally:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()
        alone = [v for v in (bl.dd_direct_gbps(experts, "1M", 512) for _ in range(3)) if v]
        loop = subprocess.Popen(["bash", "-c", f"while :; do '{os.path.join(self.a.bin, 'codec_bench')}' "
                                               "--sections=threads --threads=1 --min_seconds=0.2 >/dev/null; done"],
                                start_new_session=True)
        try:
            time.sleep(1)
            busy = [v for v in (bl.dd_direct_gbps(experts, "1M", 512) for _ in range(3)) if v]
        finally:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()
        med = (lambda v: sorted(v)[len(v) // 2] if v else None)
        self.save("b_read_vs_decode", {"decode": decode, "read": read, "decode_with_reads": decode_busy,
                                       "dd_read_gbps": med(alone), "dd_read_with_decode_gbps": med(busy),
                                       "note": "decode: GB/s of exponent bytes out, zstd level 1, disjoint E-chunks; "
                                               "read: GB/s of a 1-file sequential read; both wall-clock medians"})

    def exp_g(self, m):
        rows = []
        for pct in self.cfg["fifo_budgets"]:
            for system in ("zipmoe", "zipmoe-fifo-dispatch"):
                rows.append(self.run(m, system, pct, self.cfg["tokens"]))
        self.save(f"g_makespan_{m['arch']}", {"rows": [self.public(r) for r in rows]})

    def exp_f(self, m):
        rows = []
        for pct in self.cfg["ablation_budgets"]:
            for system in (*ABLATION, *self.cfg["prefetch_systems"]):
                rows.append(self.run(m, system, pct, self.cfg["tokens"]))
        self.save(f"f_ablation_{m['arch']}", {"rows": [self.public(r) for r in rows]})

    def exp_d(self, m):
        rows = []
        for b in self.cfg["batches"]:
            for system in self.cfg["batch_systems"]:
                rows.append(self.run(m, system, 50, self.cfg["tokens"], batch=b))
        self.save(f"d_batch_{m['arch']}", {"budget_pct": 50, "rows": [self.public(r) for r in rows]})

    def exp_e(self, m):
        rows = []
        for n in self.cfg["lengths"]:
            for system in self.cfg["length_systems"]:
                rows.append(self.run(m, system, 50, n))
        self.save(f"e_length_{m['arch']}", {"budget_pct": 50, "rows": [self.public(r) for r in rows]})

    def exp_switch(self):
        """Switch Transformers (issue 19; the paper's third model family) in (c) and (f): the F32 encoder-decoder
        preset of cfg["switch"] (top-1 routing, one sparse layer of 32 experts in the encoder and one in the
        decoder), the prompt feeding the encoder and decoding from decoder_start_token_id. Its own budgets, token
        count and sampling: with tied embeddings and N(0, 0.02²) layers the synthetic model's output repeats its
        input token, so greedy decoding emits token 0 forever and selects one decoder expert; sampled at
        temperature cfg["switch"]["sampling"] (seeded, so the run is reproducible and checked against the
        reference with the same seed) the tokens, and so the decoder's experts, vary as a real model's would. (c): every policy at each budget; (f): the eviction ablation, without the
        prefetch systems (no next-layer prediction for encoder-decoder models). Same prompt, cap rule and
        bit-exactness check as the decoder-only runs."""
        sc = self.cfg["switch"]
        m = self.prepare("switch_transformers", sc["preset"])
        m["gen_args"] = list(sc["sampling"])  # calibrate(), reference() and run() pass them to every generation
        self.calibrate(m, 50)
        tokens = sc["tokens"]
        self.reference(m, tokens)
        rows = [self.run(m, system, pct, tokens) for pct in sc["budgets"] for system in POLICIES]
        self.save("c_tpot_vs_budget_switch_transformers", {"model": self.model_meta(m), "sampling": sc["sampling"],
                                                           "rows": [self.public(r) for r in rows]})
        rows = [self.run(m, system, pct, tokens) for pct in sc["ablation_budgets"] for system in ABLATION]
        self.save("f_ablation_switch_transformers", {"model": self.model_meta(m), "rows": [self.public(r) for r in rows]})

    def exp_i(self):
        gpu = self.meta["machine"].get("gpu")
        self.save("i_gpu", {"skipped": gpu is None,
                            "reason": "no CUDA device (nvidia-smi absent or lists no GPU)" if gpu is None else
                            "GPU present: recovery_bench / GPU TPOT not wired into the suite yet",
                            "gpu": gpu})

    def exp_deepseek(self):
        """deepseek_v2: every policy at 25 / 50 % on the preset of this mode; bit-exactness and TPOT."""
        m = self.prepare("deepseek_v2", self.cfg["deepseek"])
        self.calibrate(m, 50)
        rows = []
        for pct in (25, 50):
            for system in POLICIES:
                rows.append(self.run(m, system, pct, min(self.cfg["tokens"], 16)))
        self.save("c_tpot_vs_budget_deepseek_v2", {"model": self.model_meta(m), "rows": [self.public(r) for r in rows]})
