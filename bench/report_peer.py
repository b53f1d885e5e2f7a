"""Section (m) of docs/benchmarks.md (bench/report.py): zipmoe against llama.cpp under the same
memory caps, and the verdicts per cap."""

from report_util import OTHERS_MAX, plt, GIB, MIB, COLORS, load, f3, gib


class PeerSections:
    """Methods of Report (bench/report.py); self.p, self.fig, self.a, self.out as set up there."""

    def exp_m(self):
        mj = load(self.a.out, "m_llama_peer.json")
        self.p("## (m) llama.cpp as a peer: decode floor, warm TPOT / prefill, peak RSS, cold TPOT vs cap", "")
        if not mj:
            self.p("Not run.", "")
            return
        pc = mj["config"]
        fb = mj["floor_bytes"]
        best = mj.get("best") or {}
        z, l = best.get("zipmoe"), best.get("llama.cpp")
        rel = next((w.get("llama_cpp_release") for w in mj.get("warm", []) if w.get("llama_cpp_release")), None)
        disk = (self.meta.get("disk") or {}).get("odirect_gbps_1m")
        self.p(f"The peer: llama.cpp {rel or ''} (node-llama-cpp's prebuilt CPU build, `bench/llama_peer.mjs`) on a BF16 "
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
               f"(`executor_bench` on the HF directory: {pc['zipmoe_reps']} timed generations of "
               f"{pc['warm_decode']} + 1 tokens after a warm-up) and llama.cpp ({pc['warm_decode']} timed decode "
               "steps after 2 untimed, prefill = median of 3 after a warm-up), best of each: the VM's bandwidth "
               "drifts between runs. *Other work meanwhile* = CPU time the rest of the VM used during the run "
               "(`/proc/stat` busy time minus the run's own, in cores); while a system's best run shared the cores "
               f"with more than {mj.get('others_max', 0.3)} cores of it, another round runs (at most "
               f"{pc.get('extra_rounds', 0)}).", "")
        mach = mj.get("machine") or {}
        if mach:
            self.p(f"**This machine**: {mach.get('cpu') or 'an unnamed CPU'}, {mach.get('nproc')} cores seen, kernel-relevant "
                   f"flags {', '.join(mach.get('flags') or []) or 'none'}; zipmoe's matrix kernel "
                   f"`{(z or {}).get('kernel') or '?'}` (`ZIPMOE_GEMM_ISA` or the CPU's best), llama.cpp's CPU variant "
                   f"`{(l or {}).get('kernel') or '?'}` (the `libggml-cpu-*.so` it loaded). Ratios below use the best "
                   "run of each; the medians over the interleaved rounds are in brackets.", "")
        if mj.get("llama_error"):
            self.p(f"**llama.cpp could not run**: {mj['llama_error']}", "")
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
                          f"; {lr} is far above the floor too, so on these cores a BF16 matrix-vector step is bound "
                          "by the per-byte work (widening BF16, FMAs, the per-layer threading), not by DRAM"
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
                f"{mj['threads']} cores, llama.cpp's ≈ {gl:.1f} GFLOP/s: the gap is in the matrix kernels "
                "(and each token's experts are multiplied per expert, in small row groups), not in bytes read")
        if rss.get("peak_rss_bytes"):
            r = rss["peak_rss_bytes"] / rss["allowed_bytes"]
            add("peak RSS, all-resident `zipmoe generate` / (checkpoint × 1.05 + 512 MiB)", "≤ 1",
                f"{r:.2f} ({gib(rss['peak_rss_bytes'])} / {gib(rss['allowed_bytes'])} GiB)", r <= 1,
                "" if r <= 1 else f"{(rss['peak_rss_bytes'] - rss['weights_bytes']) / MIB:.0f} MiB above the "
                f"{gib(rss['weights_bytes'])} GiB of mapped checkpoint: torch, activations, KV cache and any copies")
        variants = [("zipmoe", rows, mj.get("cold50_over_warm"))]
        pf = pc.get("sweep_prefetch")
        if pf and any(x.get("zipmoe_prefetch") for x in rows):
            variants.append((f"zipmoe --prefetch {pf}", [self.prefetch_view(x) for x in rows],
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
            verdicts = [(x, *self.cap_verdict(x, sw)) for x in both]
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
                    self.cap_why(worst[0], rows_v, sw) if worst and not ok else "")
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
                    self.cap_why(worst[0], rows_v, sw) if worst else "")
        if vals:
            self.p("| measure | target | measured | met? | why missed (from this run's data) |", "|---|---|---|---|---|")
            for measure, target, value, ok, why in vals:
                self.p(f"| {measure} | {target} | {value} | {'yes' if ok else '**no**'} | {why if not ok else ''} |")
            self.p("")
        warm = mj.get("warm") or []
        if warm:
            self.p("| round | system | TPOT s | prefill tok/s | weights resident | other work meanwhile (cores) | "
                   "group peak GiB (own memory) |", "|---|---|---|---|---|---|---|")
            for w in warm:
                res = "–" if w.get("resident") is None else f"{w['resident']:.0%}"
                if w.get("ok"):
                    self.p(f"| {w['round'] + 1} | {w['system']} | {f3(w['tpot_s'], 4)} | {w['prefill_tokens_per_s']:.1f} | "
                           f"{res} | {f3(w.get('others_cpu'), 2)} | {gib(w.get('peak_bytes'))} |")
                else:
                    self.p(f"| {w['round'] + 1} | {w['system']} | failed: {w.get('error', '')} | | {res} | | |")
            bws = ", ".join(f"{b['gbps']:.1f}" + (f" (other work meanwhile: {b['others_cpu']:.2f} cores)"
                                                  if b.get("others_cpu") is not None else "")
                            for b in mj.get("membw") or [])
            self.p("", f"membw_bench best per run: {bws} GB/s. " + (
                f"All-resident `zipmoe generate` (the RSS run): TPOT {f3(rss.get('tpot_s'), 4)} s, peak RSS "
                f"{gib(rss.get('peak_rss_bytes'))} GiB for a {gib(rss.get('weights_bytes'))} GiB checkpoint (RSS "
                "counts the mapped checkpoint pages)." if rss.get("peak_rss_bytes") else ""), "")
        if sw.get("skipped"):
            self.p(f"Cold sweep skipped: {sw['skipped']}.", "")
            return
        if not rows:
            return
        self.p(f"**Cold TPOT vs cap.** Both systems run in the cgroup at each cap with the page cache dropped first, "
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
            self.fig("m_llama_peer_tpot_vs_cap.png", "TPOT vs memory cap, zipmoe and llama.cpp")
        pf = pc.get("sweep_prefetch")
        self.p("| cap GiB | which cap | llama.cpp holds | zipmoe budget | zipmoe TPOT s | TTFT s | its preload s (MiB) | "
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
                text, ok, r = self.cap_verdict(x, sw)
                ratio = text.split(" (")[0] if r is not None else text
                if r is not None:
                    met = "yes" if r <= target else "**no**"
                elif ok is not None:
                    met = "yes" if ok else "**no**"
            holds = "–" if x.get("llama_holds") is None else f"{max(0.0, x['llama_holds']):.0%}"
            extra = ""
            if pf:
                v = self.prefetch_view(x)
                zp = v["zipmoe"]
                acc = (zp.get("prefetch") or {}).get("accuracy")
                pt = f"{f3(zp['tpot_s'])} ({f3(acc, 2)})" if zp.get("ok") else zp.get("error", "failed").split(" (")[0]
                pr, pm = "–", "–"
                if zp.get("ok") and not lc.get("skipped"):
                    text, ok, r = self.cap_verdict(v, sw)
                    pr = text.split(" (")[0] if r is not None else text
                    pm = ("yes" if r <= target else "**no**") if r is not None else \
                        ("–" if ok is None else "yes" if ok else "**no**")
                extra = f" {pt} | {pr} | {pm} |"
            self.p(f"| {gib(x['cap_bytes'])} | {x['label']} | {holds} | {zc.get('budget_pct')} % | {zt} | {lt} | "
                   f"{f3(lc.get('load_s'), 1)} | {lc.get('major_faults', '–')} | {f3(zc.get('others_cpu'), 2)} / "
                   f"{f3(lc.get('others_cpu'), 2)} | {ratio} | ≤ {target} | {met} |{extra}")
        diff = [x for x in rows if x["zipmoe"].get("ok") and x["zipmoe"].get("same_tokens_as_resident") is False]
        self.p("", "zipmoe's tokens in every cold run " + (
            "equal the all-resident run's." if not diff else
            f"**differ from the all-resident run's at {len(diff)} cap(s)**.") + " llama.cpp computes in its own order "
            "and precision (BF16 activations in its matrix products), so its tokens may drift from zipmoe's after a "
            "few steps; `bench/peer_check.py` checks that the two carry the same model.", "")

    @staticmethod
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

    @staticmethod
    def prefetch_view(x):
        """A row of (m)'s sweep as seen by its prefetching zipmoe run (zipmoe_prefetch in place of zipmoe)."""
        zp = x.get("zipmoe_prefetch") or {"ok": False, "error": "not run"}
        return dict(x, zipmoe=zp, ratio=x.get("ratio_prefetch"), ratio_partial=x.get("ratio_prefetch_partial"),
                    zipmoe_preload=zp.get("preload"))

    @staticmethod
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
