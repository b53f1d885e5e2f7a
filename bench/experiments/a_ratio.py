"""(a) Compressed size per codec / level / K vs the entropy bound (ZipMoE Fig. 3): codec_bench --sections=ratio and
the models' `zipmoe inspect`; its report section. An experiment of bench/suite.py (bench/experiments/__init__.py)."""
import json
import os
import subprocess

from benchlib import f3, load

NAME = "a"
NEEDS = ()
CONFIG = {"quick": {}, "full": {}}


def run(s):
    p = subprocess.run([os.path.join(s.a.bin, "codec_bench"), "--sections=ratio", "--min_seconds=0.05"],
                       capture_output=True, text=True)
    open(os.path.join(s.logs, "codec_bench_ratio.log"), "w").write(p.stdout + p.stderr)
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
              for (a, pr), mm in s.models.items()}
    s.save("a_ratio", {"codec_bench": rows, "models": models})


# ------------------------------------------------------------------ report

def report(rep):
    plt = rep.plt
    a = load(rep.a.out, "a_ratio.json")
    rep.p("## (a) Compressed size per codec / level / K vs the entropy bound (Fig. 3)", "")
    if not a:
        rep.p("Not run.", "")
        return
    rows = [r for r in a["codec_bench"] if r["stored_pct"] is not None and "1024x704" in r["tensor"]]
    if plt and rows:
        labels = [f"{r['codec']} {r['level']} K={r['k']}" for r in rows]
        plt.figure(figsize=(9, 3.4))
        plt.bar(range(len(rows)), [r["stored_pct"] for r in rows], color=["C3" if r["codec"] == "zstd" and
                                                                          r["level"] == "1" else "C0" for r in rows])
        plt.axhline(rows[0]["bound_pct"], color="k", ls="--", label=f"entropy bound (H+8)/16 = {rows[0]['bound_pct']}%")
        plt.xticks(range(len(rows)), labels, rotation=60, fontsize=7, ha="right")
        plt.ylabel("stored / raw BF16 (%)")
        plt.ylim(60, 101)
        plt.legend(fontsize=8)
        plt.title("1024x704 BF16 expert ~ N(0, 0.02²) (codec_bench --sections=ratio)", fontsize=9)
        rep.fig("a_ratio.png", "compressed size vs entropy bound")
    rep.p("| tensor | codec | level | K | E bits/value | H bits | stored/raw | bound | compress MB/s |",
          "|---|---|---|---|---|---|---|---|---|")
    for r in a["codec_bench"]:
        rep.p(f"| {r['tensor']} | {r['codec']} | {r['level']} | {r['k']} | {f3(r['e_bits'], 4)} | {f3(r['h_bits'], 4)} | "
              f"{f3(r['stored_pct'], 2)}% | {f3(r['bound_pct'], 2)}% | {f3(r['compress_mbps'], 1)} |")
    rep.p("", "Whole models as compressed for this run (`zipmoe inspect --json`):", "")
    for name, info in a.get("models", {}).items():
        rep.p(f"- {name}: `{json.dumps({k: v for k, v in info.items() if not isinstance(v, (list, dict))})}`")
    rep.p("")

# ------------------------------------------------------------------ (b)
