"""Experiments (t) and (s) of bench/suite.py: the trained model's routing and ablation, and SMoE expert
substitution's quality (KL, top-1 agreement) vs speed."""
import array
import contextlib
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import benchlib as bl
import routing_stats
from suite_config import ABLATION, ROUTER_SKEW, SUBST_ALPHAS, SUBST_INDEX, TRAINED


class QualityExperiments:
    """Methods of Suite (bench/suite.py); self.a, self.cfg, self.meta, self.zm, self.run, ... as set up there."""

    def prepare_trained(self):
        """The trained Qwen2-MoE shipped in models/ (learned routing, a learned BPE tokenizer): its HF
        directory as is, compressed once under --models (again when the checkpoint's bytes change)."""
        hf = os.path.join(self.a.repo, "models", TRAINED)
        zstd = os.path.join(self.a.models, TRAINED + "-zstd")
        digest = hashlib.sha256(open(os.path.join(hf, "model.safetensors"), "rb").read()).hexdigest()
        stamp = os.path.join(zstd, "source.sha256")
        t0 = time.time()
        if not (os.path.exists(stamp) and open(stamp).read().strip() == digest):
            bl.log(f"compress {hf} -> {zstd}")
            self.zm("compress", hf, zstd, "--codec", "zstd", "--force", log=f"compress-{TRAINED}.log")
            self.zm("profile", "--model", zstd, log=f"profile-{TRAINED}.log", cold=True)
            with contextlib.suppress(OSError):
                os.remove(os.path.join(zstd, "prefetch_residuals.safetensors"))
            open(stamp, "w").write(digest + "\n")
        self.calibrate_residuals(zstd, TRAINED)
        info = json.loads(subprocess.run([self.zipmoe, "inspect", zstd, "--json"], capture_output=True, text=True,
                                         check=True).stdout)
        m = {"arch": "qwen2_moe", "preset": "trained", "root": hf, "hf": hf, "zstd": zstd, "inspect": info,
             "config": json.load(open(os.path.join(zstd, "config.json"))),
             "expert_bytes": int(info["expert_bytes_raw"]), "prepare_s": time.time() - t0}
        self.models[("qwen2_moe", "trained")] = m
        return m

    def exp_t(self, mini):
        """(t) The trained model: routing statistics of learned routing next to the synthetic models'
        (bench/routing_stats.py), and the eviction ablation of (f) on it, cold and capped."""
        tc = self.cfg["trained"]
        m = self.prepare_trained()
        self.calibrate(m, 50)
        self.reference(m, tc["tokens"])
        rows = []
        for pct in tc["budgets"]:
            for system in (*ABLATION, *self.cfg["prefetch_systems"]):
                rows.append(self.run(m, system, pct, tc["tokens"]))
        routing = []
        for name, mm, n in ((f"{TRAINED} (trained)", m, tc["routing_prompts"]),
                            (f"qwen2_moe mini (synthetic, --router-skew {ROUTER_SKEW})", mini, tc["routing_prompts_mini"])):
            with tempfile.TemporaryDirectory(prefix="zipmoe-routing-") as work:
                sessions = routing_stats.run_traces(self.zipmoe, mm["hf"], n, tc["tokens"], self.threads, work)
            cfg = mm["config"]
            row = {"model": name, "prompts": n, "tokens": tc["tokens"],
                   **routing_stats.stats(sessions, int(cfg["num_experts"]), int(cfg["num_experts_per_tok"]))}
            info = mm["inspect"]
            row.update({k: info[k] for k in ("exponent_entropy_bits", "e_bits_per_value", "ratio", "entropy_bound_ratio")})
            bl.log(f"routing {name}: {json.dumps(row)}")
            routing.append(row)
        self.exp_l(m, tag="-trained")  # (l) on learned routing: written as l_load_qwen2_moe-trained.json
        self.save("t_trained", {"model": TRAINED, "tokens": tc["tokens"], "rows": [self.public(r) for r in rows],
                                "routing": routing, "card": os.path.join("models", TRAINED, "README.md")})

    @staticmethod
    def logit_rows(path, vocab):
        """float32 logits file (generate --logits-out) -> list of rows of `vocab` floats."""
        a = array.array("f")
        a.frombytes(open(path, "rb").read())
        if sys.byteorder != "little":
            a.byteswap()
        return [a[i:i + vocab] for i in range(0, len(a), vocab)]

    @staticmethod
    def kl_and_top1(p_row, q_row):
        """KL(softmax(p) || softmax(q)) in nats, and whether the two argmaxes agree."""
        mp, mq = max(p_row), max(q_row)
        zp = math.log(sum(math.exp(x - mp) for x in p_row))
        zq = math.log(sum(math.exp(x - mq) for x in q_row))
        kl = 0.0
        for x, y in zip(p_row, q_row):
            lp = x - mp - zp
            kl += math.exp(lp) * (lp - (y - mq - zq))
        top1 = max(range(len(p_row)), key=p_row.__getitem__) == max(range(len(q_row)), key=q_row.__getitem__)
        return max(kl, 0.0), top1

    def exp_s(self, mini):
        """(s) SMoE expert substitution: for each threshold α, `--policy smoe --substitution-alpha α` at one
        budget, cold and capped, on several ShareGPT prompts; its logits against the exact all-resident run's.
        A row's logits are comparable while every earlier input is the same: every prompt position, then the
        decode steps up to and including the first whose greedy token differs from the exact run's."""
        sc = self.cfg["substitution"]
        models = []
        for name in sc["models"]:
            models.append(self.prepare_trained() if name == "trained" else mini)
        out = []
        for m in models:
            self.calibrate(m, sc["budget"])
            vocab = int(m["config"]["vocab_size"])
            budget = m["expert_bytes"] * sc["budget"] // 100
            limit = self.cap_bytes(m, sc["budget"])
            per_alpha = {a: {"kl": [], "top1": [], "prefix": [], "steps": 0, "tpot": [], "hit": [], "sub": 0, "routed": 0}
                         for a in SUBST_ALPHAS}
            for i in range(sc["prompts"]):
                index = SUBST_INDEX + i
                base = f"s-{m['arch']}-{m['preset']}-p{index}"
                exact_logits = os.path.join(self.out, base + "-exact.logits")
                r = self.zm("generate", "--model", m["hf"], *self.prompt_args(index), "--max-new-tokens",
                            str(sc["tokens"]), "--ignore-eos", "--threads", str(self.threads), "--json",
                            "--logits-out", exact_logits, log=base + "-exact.log")
                exact = json.loads(r["stdout"].strip().splitlines()[-1])
                p_rows = self.logit_rows(exact_logits, vocab)
                os.remove(exact_logits)
                n_prompt = len(exact["prompt_ids"])
                for alpha in SUBST_ALPHAS:
                    tag = f"{base}-a{alpha}"
                    logits = os.path.join(self.out, tag + ".logits")
                    stats = os.path.join(self.out, "runs", tag + ".json")
                    os.makedirs(os.path.dirname(stats), exist_ok=True)
                    lim = None if limit is None else limit + len(p_rows) * vocab * 4
                    try:
                        r = self.zm("generate", "--model", m["zstd"], *self.prompt_args(index), "--max-new-tokens",
                                    str(sc["tokens"]), "--ignore-eos", "--threads", str(self.threads), "--json",
                                    "--memory-budget", str(budget), "--policy", "smoe", "--substitution-alpha",
                                    str(alpha), "--stats-json", stats, "--logits-out", logits, log=tag + ".log",
                                    cold=True, capped=True, limit=lim, timeout=1800)
                    except bl.RunError as e:
                        bl.warn(f"{tag}: {str(e.args[0])[:300]}")
                        continue
                    j = json.loads(r["stdout"].strip().splitlines()[-1])
                    st = json.load(open(stats))
                    q_rows = self.logit_rows(logits, vocab)
                    os.remove(logits)
                    got, want = j["generated_ids"], exact["generated_ids"]
                    prefix = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                    rows = min(len(p_rows), len(q_rows), n_prompt + prefix)
                    acc = per_alpha[alpha]
                    for k in range(rows):
                        kl, top1 = self.kl_and_top1(p_rows[k], q_rows[k])
                        acc["kl"].append(kl)
                        acc["top1"].append(top1)
                    acc["prefix"].append(prefix)
                    acc["steps"] += len(want)
                    acc["tpot"].append(j["tpot_s"])
                    acc["hit"].append(st["requests"].get("hit_rate") or 0.0)
                    acc["sub"] += st["substitution"]["substituted"]
                    acc["routed"] += st["substitution"]["routed"]
                    bl.log(f"{tag}: tpot {j['tpot_s']:.3f} s, substituted {st['substitution']['substituted']} / "
                           f"{st['substitution']['routed']}, same tokens for {prefix} / {len(want)} steps")
            for alpha in SUBST_ALPHAS:
                acc = per_alpha[alpha]
                if not acc["tpot"]:
                    continue
                out.append({"model": f"{m['arch']}-{m['preset']}", "alpha": alpha, "budget_pct": sc["budget"],
                            "prompts": len(acc["tpot"]), "positions": len(acc["kl"]),
                            "kl_mean": sum(acc["kl"]) / max(1, len(acc["kl"])),
                            "kl_max": max(acc["kl"]) if acc["kl"] else None,
                            "top1_agreement": sum(acc["top1"]) / max(1, len(acc["top1"])),
                            "same_token_steps": sum(acc["prefix"]), "decode_steps": acc["steps"],
                            "substituted_rate": acc["sub"] / max(1, acc["routed"]),
                            "tpot_s": sorted(acc["tpot"])[len(acc["tpot"]) // 2],
                            "hit_rate": sum(acc["hit"]) / len(acc["hit"])})
        self.save("s_substitution", {"alphas": SUBST_ALPHAS, "tokens": sc["tokens"], "budget_pct": sc["budget"],
                                     "prompt_index": SUBST_INDEX, "rows": out})
