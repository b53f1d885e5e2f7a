"""The serving sections of docs/benchmarks.md (bench/report.py): (h) embedded vs multi-process,
(l) serving under load, (s) and (q)."""

from report_util import load, f3, gib


class ServingSections:
    """Methods of Report (bench/report.py); self.p, self.fig, self.a, self.out as set up there."""

    def exp_h(self):
        h = load(self.a.out, "h_embedded_vs_up_qwen2_moe.json")
        self.p("## (h) Embedded vs multi-process: `zipmoe serve` and `zipmoe up` measured the same way", "")
        if not h or "rows" not in h:
            self.p("Not run (or an older layout of this experiment).", "")
            return
        lc = h["config"]
        self.p(f"50 % budget, the same memory cap, the (l) requests (ShareGPT from #{h['prompt_offset']}, "
               f"{lc['requests']} requests of {lc['max_tokens']} new tokens, `--ignore-eos`), closed loop, one warm-up "
               "request first, TTFT/TPOT client-side (`bench/load.py`). `serve` runs every service as a thread of one "
               f"process; `up` runs {h.get('processes') or 'one process per service'} processes (ZeroMQ handshakes, "
               "shared-memory pipes for the messages, the shared arena). `serve-separate-recovery` = serve with `--separate-recovery`: every missed expert is recovered "
               "to BF16 before it is computed, as up must do (its executor is another process and reads BF16 from the "
               "arena), instead of being multiplied straight from its E/SM planes; it tells how much of up's gap is "
               "that recovery rather than the processes and messages. Target (issue 20): up / serve TPOT ≤ 1.05 at "
               "concurrency 1, ≤ 1.10 at 4.", "")
        rounds = h.get("rounds", 1)
        if rounds > 1:
            self.p(f"The modes ran in turn {rounds} times (serve, serve-separate-recovery, up, then again), each time on "
                   "a fresh server; each cell is the median over the rounds (per-round values in brackets), so a slow "
                   "spell of the machine does not land on one mode only. The ratio to serve is paired: each round's "
                   "TPOT over the same round's serve TPOT, then the median of those (per-round ratios in brackets), "
                   "so a spell that slows one whole round cancels out of it.", "")
        self.p("| concurrency | mode | TPOT p50 s | TTFT p50 s | tokens/s | / serve TPOT | target | met? | "
               "same text as serve |", "|---|---|---|---|---|---|---|---|---|")

        def median(xs):
            xs = sorted(x for x in xs if x is not None)
            return None if not xs else (xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2)

        def cell(rs, key, digits=3):
            vals = [((r["summary"].get(key) or {}).get("p50") if key != "output_tokens_per_s"
                     else r["summary"].get(key)) for r in rs]
            med = median(vals)
            if len(rs) < 2:
                return med, f3(med, digits)
            return med, f"{f3(med, digits)} ({', '.join(f3(v, digits) for v in vals)})"
        by = {}
        for r in h["rows"]:
            if r.get("ok"):
                by.setdefault((r.get("mode"), r.get("concurrency")), []).append(r)
        def tpot(r):
            return (r["summary"].get("tpot_s") or {}).get("p50")

        def paired(rs, base_rs):
            """Median of per-round TPOT(rs) / TPOT(serve) and the per-round ratios (rounds both have)."""
            base_by = {r.get("round", 0): tpot(r) for r in base_rs}
            ratios = [tpot(r) / base_by[r.get("round", 0)] for r in rs
                      if tpot(r) and base_by.get(r.get("round", 0))]
            return median(ratios), ratios

        for c in sorted({r.get("concurrency") for r in h["rows"] if r.get("concurrency")}):
            base, _ = cell(by.get(("serve", c), []), "tpot_s") if by.get(("serve", c)) else (None, "")
            for mode in ("serve", "serve-separate-recovery", "up"):
                rs = by.get((mode, c))
                if not rs:
                    self.p(f"| {c} | {mode} | failed | | | | | | |")
                    continue
                tp, tp_text = cell(rs, "tpot_s")
                _, tt_text = cell(rs, "ttft_s", 2)
                _, tps_text = cell(rs, "output_tokens_per_s", 2)
                ratio, target, met = "", "", ""
                if mode != "serve" and base and tp:
                    x, per_round = paired(rs, by.get(("serve", c), []))
                    if x is None:  # no round with both: the ratio of the medians
                        x, per_round = tp / base, []
                    ratio = f"{x:.2f}" + (f" ({', '.join(f'{v:.2f}' for v in per_round)})" if len(per_round) > 1 else "")
                    if mode == "up":
                        target = 1.05 if c == 1 else 1.10
                        met = "yes" if x <= target else "**no**"
                        target = f"≤ {target:.2f}"
                same = "–" if mode == "serve" else ("yes" if all(r.get("same_text_as_serve") for r in rs) else "**NO**")
                self.p(f"| {c} | {mode} | {tp_text} | {tt_text} | {tps_text} | {ratio} | {target} | {met} | {same} |")
        for r in h["rows"]:
            if not r.get("ok") and r.get("error"):
                self.p("", f"{r.get('mode')}: failed: `{r['error'][:300]}`")
        self.p("")

    def prompt_text(self):
        m = self.meta
        if "prompt_index" not in m:
            return "prompt in meta.json"
        text = m.get("prompt", "")
        short = text if len(text) <= 80 else text[:77] + "..."
        return f"`{m.get('prompts_file')}` #{m['prompt_index']}: “{short}”"

    def plan_text(self):
        pp = self.meta.get("plan_prompts")
        if not pp:
            return "a *different* prompt"
        return f"{pp[1] - pp[0] + 1} *other* ShareGPT prompts (#{pp[0]}–{pp[1]}, one generation each)"

    def exp_l(self, name="l_load_qwen2_moe.json", title="## (l) Serving under load: ShareGPT requests over HTTP"):
        lj = load(self.a.out, name)
        self.p(title, "")
        if not lj:
            self.p("Not run.", "")
            return
        cfg = lj["config"]
        self.p(f"`zipmoe serve` (embedded, continuous batching, `--max-batch {max(cfg['concurrency'])}`) at "
               f"{lj['budget_pct']} % budget inside the same memory cap, started cold. `bench/load.py` streams "
               f"{cfg['requests']} real ShareGPT prompts (from #{lj['prompt_offset']}, at most "
               f"{cfg['max_prompt_chars']} characters) with `max_tokens` {cfg['max_tokens']}, temperature 0, "
               "`ignore_eos`, closed loop at each concurrency in turn (one fresh server per system; it stays up, so "
               "later rows run with a warmer cache). TTFT, TPOT and latency are client-side; **same text** = every "
               f"completion equals the first system's ({lj['rows'][0].get('system', '?') if lj['rows'] else '?'}) "
               "concurrency-1 completion of the same prompt (the suite fails otherwise).", "")
        self.p("| system | concurrency | ok | output tokens/s | req/s | TTFT p50 / p90 s | TPOT p50 / p90 s | "
               "latency p50 / p90 s | peak GiB | same text |", "|---|---|---|---|---|---|---|---|---|---|")
        for r in lj["rows"]:
            sm = r.get("summary") or {}
            if not sm:
                self.p(f"| {r['system']} | {r.get('concurrency', '–')} | failed: {r.get('error', '?')[:120]} "
                       "| | | | | | | |")
                continue

            def pp(key):
                d = sm.get(key) or {}
                return f"{f3(d.get('p50'))} / {f3(d.get('p90'))}"
            same = "–" if "same_text_as_first" not in r else ("yes" if r["same_text_as_first"] else "**NO**")
            self.p(f"| {r['system']} | {r['concurrency']} | {sm.get('ok')}/{sm.get('requests')} | "
                   f"{f3(sm.get('output_tokens_per_s'))} | {f3(sm.get('request_throughput_rps'))} | {pp('ttft_s')} | "
                   f"{pp('tpot_s')} | {pp('latency_s')} | {gib(r.get('peak_bytes'))} | {same} |")
        warm = self.warm_text(lj)
        if warm:
            self.p("", f"TPOT p50, warm server: {warm}. At concurrency 1 a warm step is compute-bound (see the "
                   "compute floor in the headline); at higher concurrency each step routes several sequences, touches "
                   "more distinct experts per layer and capacity binds, as at the lowest budget of (c). `serve` "
                   "reports no per-run hit rates to this suite, so the split is not shown here.")
        self.p("", "Rerun against any server (also `zipmoe up` or a Jetson): `/usr/bin/python3 bench/load.py --url "
               "http://HOST:PORT --concurrency 4 --requests 32 --out load.json` (`--rate R` for Poisson arrivals, "
               "`--check-against` an earlier output).", "")

    @staticmethod
    def load_ratio(lj, concurrency=1):
        """(zipmoe/lru, zipmoe, lru) TPOT p50 of (l) at `concurrency`, or None."""
        p50 = {}
        for r in (lj or {}).get("rows", []):
            d = ((r.get("summary") or {}).get("tpot_s") or {}).get("p50")
            if r.get("ok") and r.get("concurrency") == concurrency and d:
                p50[r["system"]] = d
        if "zipmoe" in p50 and "lru" in p50:
            return p50["zipmoe"] / p50["lru"], p50["zipmoe"], p50["lru"]
        return None

    def warm_text(self, lj):
        """One sentence on (l)'s zipmoe/lru TPOT ratios, lowest and highest concurrency; "" without both."""
        conc = sorted(set((lj or {}).get("config", {}).get("concurrency", [])))
        parts = []
        for c in (conc[0], conc[-1]) if len(conc) > 1 else conc:
            w = self.load_ratio(lj, c)
            if w:
                parts.append(f"concurrency {c}: zipmoe/lru = **{w[0]:.2f}** ({f3(w[1])} vs {f3(w[2])} s)")
        return "; ".join(parts)

    # ------------------------------------------------------------------ (m)

    def exp_s(self):
        s = load(self.a.out, "s_substitution.json")
        self.p("## (s) SMoE expert substitution: accuracy against speed for the threshold α", "")
        if not s:
            self.p("Not run.", "")
            return
        self.p(f"`--policy smoe --substitution-alpha α` at a {s['budget_pct']} % budget, cold and capped, "
               f"{s['tokens']} new tokens (greedy) per ShareGPT prompt from #{s['prompt_index']}, against the exact "
               "all-resident run of the same prompt. A selected expert scoring below (1+α)·S_k+1 that the cache "
               "does not hold in F is replaced by a cached (or elsewhere top-scored) expert scoring at least "
               "(1−α)·S_k+1; α = 0 is the exact model. **KL** = KL(exact ‖ substituted) of the next-token "
               "distributions, in nats, and **top-1** = share of positions whose most likely token is the exact "
               "run's, both over the positions whose inputs are still the same in the two runs (every prompt "
               "position, then the decode steps up to the first differing token); **same tokens** = greedy decode "
               "steps before the first difference, over all steps; **substituted** = share of routed (token, expert) "
               "pairs replaced. TPOT: median over the prompts.", "")
        self.p("| model | α | prompts | positions | KL mean | KL max | top-1 | same tokens | substituted | TPOT s | "
               "hit rate |", "|---|---|---|---|---|---|---|---|---|---|---|")
        for r in s["rows"]:
            self.p(f"| {r['model']} | {r['alpha']} | {r['prompts']} | {r['positions']} | {r['kl_mean']:.2e} | "
                   f"{(r['kl_max'] or 0):.2e} | {r['top1_agreement']:.3f} | {r['same_token_steps']} / "
                   f"{r['decode_steps']} | {r['substituted_rate']:.3f} | {f3(r['tpot_s'])} | {f3(r['hit_rate'])} |")
        self.p("")

    def exp_q(self):
        q = load(self.a.out, "q_request_grouping_qwen2_moe.json")
        self.p("## (q) CoServe's request grouping in `zipmoe serve`", "")
        if not q:
            self.p("Not run.", "")
            return
        qc = q["config"]
        self.p(f"`zipmoe serve --policy coserve --max-batch {qc['max_batch']}` at a {q['budget_pct']} % budget inside "
               f"the same memory cap, started cold; `bench/load.py` keeps {qc['concurrency']} clients busy (closed loop) "
               f"with {qc['requests']} ShareGPT requests from #{q['prompt_offset']} (at most {qc['max_prompt_chars']} "
               f"characters, {qc['max_tokens']} new tokens, `--ignore-eos`), so sequences wait for a batch slot. "
               "`none` admits them first come, first served; `coserve` (`--request-grouping coserve`) admits the one "
               "of the first 8 waiting whose predicted experts are most at hand (docs/policies.md \"Request "
               "grouping\"). **grouped** = admissions that skipped an older waiting sequence. Hit rate and bytes read "
               "from the server's /metrics after the run (expert lookups, prefill included); TTFT and latency "
               "client-side.", "")
        self.p("| grouping | tokens/s | TTFT p50 s | TTFT p90 s | latency p90 s | TPOT p50 s | hit rate | read MiB | "
               "grouped / admitted | same text as none |", "|---|---|---|---|---|---|---|---|---|---|")
        for r in q["rows"]:
            if not r.get("summary"):
                self.p(f"| {r['grouping']} | failed: {r.get('error', '')[:100]} | | | | | | | | |")
                continue
            s = r["summary"]
            pct = lambda k, p: (s.get(k) or {}).get(p)  # noqa: E731
            admitted = (r.get("admitted_fifo") or 0) + (r.get("admitted_grouped") or 0)
            same = "–" if r["grouping"] == "none" else ("yes" if r.get("same_text_as_none") else "**NO**")
            self.p(f"| {r['grouping']} | {f3(s.get('output_tokens_per_s'), 2)} | {f3(pct('ttft_s', 'p50'), 2)} | "
                   f"{f3(pct('ttft_s', 'p90'), 2)} | {f3(pct('latency_s', 'p90'), 2)} | {f3(pct('tpot_s', 'p50'))} | "
                   f"{f3(r.get('hit_rate'))} | {(r.get('read_bytes') or 0) / 2**20:.0f} | "
                   f"{int(r.get('admitted_grouped') or 0)} / {int(admitted)} | {same} |")
        self.p("")
