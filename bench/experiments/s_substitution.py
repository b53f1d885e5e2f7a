"""(s) SMoE expert substitution: accuracy (KL, top-1 agreement) against speed for the threshold α; its report
section. An experiment of bench/suite.py (bench/experiments/__init__.py)."""
import array
import json
import math
import os
import sys

import benchlib as bl
from benchlib import f3, load

NAME = "s"
NEEDS = ("calibrate",)
# Prompts from SUBST_INDEX, the thresholds α swept (0 = exact).
SUBST_INDEX = 400
SUBST_ALPHAS = [0.0, 0.1, 0.2, 0.3, 0.5]
CONFIG = {"quick": {"substitution": {"models": ["trained"], "prompts": 2, "tokens": 24, "budget": 25}},
          "full": {"substitution": {"models": ["trained", "mini"], "prompts": 8, "tokens": 32, "budget": 25}}}


def quick_note(cfg):
    q, f = cfg["substitution"], CONFIG["full"]["substitution"]
    return f"(s) {q['prompts']} prompts, the trained model only (`--full`: {f['prompts']}, and the mini model)"


def logit_rows(path, vocab):
    """float32 logits file (generate --logits-out) -> list of rows of `vocab` floats."""
    a = array.array("f")
    a.frombytes(open(path, "rb").read())
    if sys.byteorder != "little":
        a.byteswap()
    return [a[i:i + vocab] for i in range(0, len(a), vocab)]


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


def run(s):
    """(s) SMoE expert substitution: for each threshold α, `--policy smoe --substitution-alpha α` at one
    budget, cold and capped, on several ShareGPT prompts; its logits against the exact all-resident run's.
    A row's logits are comparable while every earlier input is the same: every prompt position, then the
    decode steps up to and including the first whose greedy token differs from the exact run's."""
    mini = s.mini
    sc = s.cfg["substitution"]
    models = []
    for name in sc["models"]:
        models.append(s.prepare_trained() if name == "trained" else mini)
    out = []
    for m in models:
        s.calibrate(m, sc["budget"])
        vocab = int(m["config"]["vocab_size"])
        budget = m["expert_bytes"] * sc["budget"] // 100
        limit = s.cap_bytes(m, sc["budget"])
        per_alpha = {a: {"kl": [], "top1": [], "prefix": [], "steps": 0, "tpot": [], "hit": [], "sub": 0, "routed": 0}
                     for a in SUBST_ALPHAS}
        for i in range(sc["prompts"]):
            index = SUBST_INDEX + i
            base = f"s-{m['arch']}-{m['preset']}-p{index}"
            exact_logits = os.path.join(s.out, base + "-exact.logits")
            r = s.zm("generate", "--model", m["hf"], *s.prompt_args(index), "--max-new-tokens",
                     str(sc["tokens"]), "--ignore-eos", "--threads", str(s.threads), "--json",
                     "--logits-out", exact_logits, log=base + "-exact.log")
            exact = json.loads(r["stdout"].strip().splitlines()[-1])
            p_rows = logit_rows(exact_logits, vocab)
            os.remove(exact_logits)
            n_prompt = len(exact["prompt_ids"])
            for alpha in SUBST_ALPHAS:
                tag = f"{base}-a{alpha}"
                logits = os.path.join(s.out, tag + ".logits")
                stats = os.path.join(s.out, "runs", tag + ".json")
                os.makedirs(os.path.dirname(stats), exist_ok=True)
                lim = None if limit is None else limit + len(p_rows) * vocab * 4
                try:
                    r = s.zm("generate", "--model", m["zstd"], *s.prompt_args(index), "--max-new-tokens",
                             str(sc["tokens"]), "--ignore-eos", "--threads", str(s.threads), "--json",
                             "--memory-budget", str(budget), "--policy", "smoe", "--substitution-alpha",
                             str(alpha), "--stats-json", stats, "--logits-out", logits, log=tag + ".log",
                             cold=True, capped=True, limit=lim, timeout=1800)
                except bl.RunError as e:
                    bl.warn(f"{tag}: {str(e.args[0])[:300]}")
                    continue
                j = json.loads(r["stdout"].strip().splitlines()[-1])
                st = json.load(open(stats))
                q_rows = logit_rows(logits, vocab)
                os.remove(logits)
                got, want = j["generated_ids"], exact["generated_ids"]
                prefix = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                rows = min(len(p_rows), len(q_rows), n_prompt + prefix)
                acc = per_alpha[alpha]
                for k in range(rows):
                    kl, top1 = kl_and_top1(p_rows[k], q_rows[k])
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
    s.save("s_substitution", {"alphas": SUBST_ALPHAS, "tokens": sc["tokens"], "budget_pct": sc["budget"],
                              "prompt_index": SUBST_INDEX, "rows": out})


# ------------------------------------------------------------------ report

def report(rep):
    s = load(rep.a.out, "s_substitution.json")
    rep.p("## (s) SMoE expert substitution: accuracy against speed for the threshold α", "")
    if not s:
        rep.p("Not run.", "")
        return
    rep.p(f"`--policy smoe --substitution-alpha α` at a {s['budget_pct']} % budget, cold and capped, "
          f"{s['tokens']} new tokens (greedy) per ShareGPT prompt from #{s['prompt_index']}, against the exact "
          "all-resident run of the same prompt. A selected expert scoring below (1+α)·S_k+1 that the cache "
          "does not hold in F is replaced by a cached (or elsewhere top-scored) expert scoring at least "
          "(1−α)·S_k+1; α = 0 is the exact model. **KL** = KL(exact ‖ substituted) of the next-token "
          "distributions, in nats, and **top-1** = share of positions whose most likely token is the exact "
          "run's, both over the positions whose inputs are still the same in the two runs (every prompt "
          "position, then the decode steps up to the first differing token); **same tokens** = greedy decode "
          "steps before the first difference, over all steps; **substituted** = share of routed (token, expert) "
          "pairs replaced. TPOT: median over the prompts.", "")
    rep.p("| model | α | prompts | positions | KL mean | KL max | top-1 | same tokens | substituted | TPOT s | "
          "hit rate |", "|---|---|---|---|---|---|---|---|---|---|---|")
    for r in s["rows"]:
        rep.p(f"| {r['model']} | {r['alpha']} | {r['prompts']} | {r['positions']} | {r['kl_mean']:.2e} | "
              f"{(r['kl_max'] or 0):.2e} | {r['top1_agreement']:.3f} | {r['same_token_steps']} / "
              f"{r['decode_steps']} | {r['substituted_rate']:.3f} | {f3(r['tpot_s'])} | {f3(r['hit_rate'])} |")
    rep.p("")
