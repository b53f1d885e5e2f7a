"""Switch Transformers (issue 19) in (c) and (f): the F32 encoder-decoder preset, every policy and the eviction
ablation; its two report sections, which the page shows under (c) and (f). An experiment of bench/suite.py
(bench/experiments/__init__.py)."""
from benchlib import MIB, f3, gib, load
from experiments.c_tpot_vs_budget import POLICIES
from experiments.f_ablation import ABLATION, ablation_table

NAME = "switch"
NEEDS = ()
CONFIG = {"quick": {"switch": {"preset": "mini", "tokens": 16, "budgets": [10], "ablation_budgets": [10],
                               "sampling": ["--temperature", "30", "--seed", "1"]}},
          "full": {"switch": {"preset": "mini", "tokens": 64, "budgets": [10, 25, 50], "ablation_budgets": [10, 25],
                              "sampling": ["--temperature", "30", "--seed", "1"]}}}


def quick_note(cfg):
    q, f = cfg["switch"], CONFIG["full"]["switch"]
    return (f"Switch Transformers {q['tokens']} tokens per run at {' / '.join(str(b) for b in q['budgets'])} % "
            f"(`--full`: {f['tokens']} at {' / '.join(str(b) for b in f['budgets'])} %)")


def run(s):
    """Switch Transformers (issue 19; the paper's third model family) in (c) and (f): the F32 encoder-decoder
    preset of cfg["switch"] (top-1 routing, one sparse layer of 32 experts in the encoder and one in the
    decoder), the prompt feeding the encoder and decoding from decoder_start_token_id. Its own budgets, token
    count and sampling: with tied embeddings and N(0, 0.02²) layers the synthetic model's output repeats its
    input token, so greedy decoding emits token 0 forever and selects one decoder expert; sampled at
    temperature cfg["switch"]["sampling"] (seeded, so the run is reproducible and checked against the
    reference with the same seed) the tokens, and so the decoder's experts, vary as a real model's would. (c): every policy at each budget; (f): the eviction ablation, without the
    prefetch systems (no next-layer prediction for encoder-decoder models). Same prompt, cap rule and
    bit-exactness check as the decoder-only runs."""
    sc = s.cfg["switch"]
    m = s.prepare("switch_transformers", sc["preset"])
    m["gen_args"] = list(sc["sampling"])  # calibrate(), reference() and run() pass them to every generation
    s.calibrate(m, 50)
    tokens = sc["tokens"]
    s.reference(m, tokens)
    rows = [s.run(m, system, pct, tokens) for pct in sc["budgets"] for system in POLICIES]
    s.save("c_tpot_vs_budget_switch_transformers", {"model": s.model_meta(m), "sampling": sc["sampling"],
                                                    "rows": [s.public(r) for r in rows]})
    rows = [s.run(m, system, pct, tokens) for pct in sc["ablation_budgets"] for system in ABLATION]
    s.save("f_ablation_switch_transformers", {"model": s.model_meta(m), "rows": [s.public(r) for r in rows]})


# ------------------------------------------------------------------ report

def model_text(rep, model):
    cfg = model.get("config") or {}
    return (f"Switch Transformers **{model['preset']}** (encoder-decoder, {cfg.get('num_layers', '?')}+"
            f"{cfg.get('num_decoder_layers', '?')} blocks, every {cfg.get('encoder_sparse_step', '?')}nd sparse, "
            f"{cfg.get('num_experts', '?')} experts, top-1 with capacity {cfg.get('expert_capacity', '?')}; "
            f"{model['expert_bytes'] / MIB:.0f} MiB of **F32** expert weights, compressed losslessly: 8-bit exponent "
            "plane + 24-bit sign|mantissa plane)")


def report_c(rep):
    """(c) for the Switch model (issue 19): the same prompt, token count, cap rule and check."""
    d = load(rep.a.out, "c_tpot_vs_budget_switch_transformers.json")
    rep.p("### (c) on Switch Transformers", "")
    if not d:
        rep.p("Not run.", "")
        return
    rep.p(f"{model_text(rep, d['model'])}. The prompt feeds the encoder; decoding starts from "
          f"`decoder_start_token_id`; (c)'s prompt, {d['rows'][0]['tokens']} new tokens sampled with "
          f"`{' '.join(d.get('sampling') or [])}` (with tied embeddings and weak synthetic layers the model's "
          "output repeats its input token, so greedy decoding emits `<pad>` forever and selects one decoder "
          "expert; the seeded samples vary the decoder's experts as a real model's tokens would, and the "
          "reference uses the same seed). A decode step routes its token through the decoder's one sparse "
          "layer: one expert. Same cap rule and bit-exactness check as above.", "",
          "| budget | cap GiB | system | TPOT s | / zipmoe | TTFT s | hit rate | read MiB | peak GiB | = resident |",
          "|---|---|---|---|---|---|---|---|---|---|")
    for r in d["rows"]:
        z = next((x for x in d["rows"] if x["budget_pct"] == r["budget_pct"] and x["system"] == "zipmoe"
                  and x.get("ok")), None)
        if not r.get("ok"):
            why = "OOM-killed under the cap" if r.get("oom") else f"failed: {r.get('error', '')[:120]}"
            rep.p(f"| {r['budget_pct']}% | {gib(r.get('cap_bytes'))} | {r['system']} | {why} | | | | | "
                  f"{gib(r.get('peak_bytes'))} | |")
            continue
        ratio = f"{r['tpot_s'] / z['tpot_s']:.2f}" if z and z["tpot_s"] else "–"
        read = f"{r['read_bytes'] / MIB:.0f}" if r.get("read_bytes") is not None else \
            f"{r.get('major_faults', 0)} major faults"
        rep.p(f"| {r['budget_pct']}% | {gib(r.get('cap_bytes'))} | {r['system']} | {f3(r['tpot_s'])} | {ratio} | "
              f"{f3(r['ttft_s'], 2)} | {f3(r.get('hit_rate'))} | {read} | {gib(r.get('peak_bytes'))} | "
              f"{'yes' if r['bit_identical'] else '**NO**'} |")
    rep.p("")

# ------------------------------------------------------------------ (r)


def report_f(rep):
    """(f) for the Switch model (issue 19)."""
    s = load(rep.a.out, "f_ablation_switch_transformers.json")
    rep.p("### (f) on Switch Transformers", "")
    if not s:
        rep.p("Not run.", "")
        return
    rep.p(f"{model_text(rep, s['model'])}: every eviction policy at (f)'s budget(s); no prefetch systems "
          "(no next-layer prediction for an encoder-decoder model). The encoder's sparse layer runs once per "
          "prompt; each decode step routes its one token through the decoder's sparse layer: one expert.", "")
    ablation_table(rep, s["rows"], read_digits=1)
    rep.p("")

# ------------------------------------------------------------------ (d), (e)
