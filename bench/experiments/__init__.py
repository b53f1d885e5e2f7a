"""The experiments of bench/suite.py, one module each: NAME (the letter `bench/run.sh --only` takes), CONFIG (its
settings per mode, merged into the suite's cfg), NEEDS (what bench/suite.py prepares first on the qwen2_moe mini
model: "calibrate" = the cap overhead and the planner's warm-up trace, "reference" = the all-resident run), run(suite)
(writes OUT/<name>.json), report(report) (its section of docs/benchmarks.md, from those JSON files only), and where
quick mode runs fewer rounds or points than --full to stay within 15 minutes, quick_note(cfg) (one line saying what,
for the report's header).

REGISTRY is the order they run in (most valuable first); SECTIONS the order of the page's sections."""
from experiments import (a_ratio, b_read_vs_decode, c_tpot_vs_budget, d_batch, deepseek, e_length, f_ablation,
                         g_makespan, h_embedded_vs_up, i_gpu, l_load, m_llama_peer, q_request_grouping,
                         r_replay_vs_budget, s_substitution, switch, t_trained)

REGISTRY = [c_tpot_vs_budget, r_replay_vs_budget, a_ratio, b_read_vs_decode, g_makespan, f_ablation, d_batch,
            e_length, deepseek, switch, h_embedded_vs_up, l_load, m_llama_peer, t_trained, s_substitution,
            q_request_grouping, i_gpu]

# The Switch model's sections sit under (c) and (f); the headline (from (c), (r) and (l)) follows (c).
SECTIONS = [c_tpot_vs_budget.report, switch.report_c, c_tpot_vs_budget.report_headline, r_replay_vs_budget.report,
            a_ratio.report, b_read_vs_decode.report, g_makespan.report, f_ablation.report, switch.report_f,
            d_batch.report, e_length.report, deepseek.report, h_embedded_vs_up.report, l_load.report,
            m_llama_peer.report, t_trained.report, s_substitution.report, q_request_grouping.report, i_gpu.report]

NAMES = [e.NAME for e in REGISTRY]


def config(mode, core):
    """The suite's cfg for `mode`: the settings every experiment shares (`core`), then each experiment's own."""
    cfg = dict(core[mode])
    for e in REGISTRY:
        cfg.update(e.CONFIG[mode])
    return cfg
