#!/usr/bin/env python3
"""The "Prefetch accuracy" panel of grafana/dashboards/zipmoe.json evaluated by promtool (ctest
grafana_prefetch_panel; issue 38 item 5): with prefetches it is used / (used + wasted) per predictor,
and with prefetching off it is one explicit "off (no prefetches)" series at -1 (shown as "off"),
never a 0/0 NaN that leaves the compose smoke test without data.

  prefetch_panel_test.py [--repo DIR] [--promtool PATH]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def panel_expr(repo):
    with open(os.path.join(repo, "grafana", "dashboards", "zipmoe.json")) as f:
        dash = json.load(f)
    stack = list(dash["panels"])
    while stack:
        p = stack.pop()
        stack.extend(p.get("panels", []))
        if p.get("title", "").startswith("Prefetch accuracy"):
            return p["targets"][0]["expr"]
    sys.exit("prefetch_panel_test: no 'Prefetch accuracy' panel in grafana/dashboards/zipmoe.json")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--promtool", default="promtool")
    args = ap.parse_args()
    # The dashboard's variables as Grafana would fill them: every instance, a 1-minute rate window.
    expr = panel_expr(args.repo).replace('instance=~"$instance"', 'instance=~".*"').replace("$__rate_interval", "2m")
    rules = {"groups": [{"name": "panel", "rules": [{"record": "panel:prefetch_accuracy", "expr": expr}]}]}
    series = 'zipmoe_runtime_prefetch_experts_total{{outcome="{}",mode="{}",instance="a"}}'
    tests = {
        "rule_files": ["rules.json"],
        "evaluation_interval": "1m",
        "tests": [
            {  # 3 used and 1 wasted a minute: 0.75
                "interval": "1m",
                "input_series": [{"series": series.format("used", "residual"), "values": "0+3x10"},
                                 {"series": series.format("wasted", "residual"), "values": "0+1x10"}],
                "promql_expr_test": [{"expr": "panel:prefetch_accuracy", "eval_time": "5m",
                                      "exp_samples": [{"labels": 'panel:prefetch_accuracy{mode="residual"}',
                                                       "value": 0.75}]}],
            },
            {  # prefetching off: the counters exist and stay 0 -> the explicit "off" series, not NaN
                "interval": "1m",
                "input_series": [{"series": series.format("used", "none"), "values": "0x10"},
                                 {"series": series.format("wasted", "none"), "values": "0x10"}],
                "promql_expr_test": [{"expr": "panel:prefetch_accuracy", "eval_time": "5m",
                                      "exp_samples": [{"labels": 'panel:prefetch_accuracy{mode="off (no prefetches)"}',
                                                       "value": -1}]}],
            },
            {  # no such series at all (an old build): the same
                "interval": "1m",
                "input_series": [{"series": 'up{instance="a"}', "values": "1x10"}],
                "promql_expr_test": [{"expr": "panel:prefetch_accuracy", "eval_time": "5m",
                                      "exp_samples": [{"labels": 'panel:prefetch_accuracy{mode="off (no prefetches)"}',
                                                       "value": -1}]}],
            },
        ],
    }
    with tempfile.TemporaryDirectory() as tmp:
        # promtool reads YAML, of which JSON is a subset.
        with open(os.path.join(tmp, "rules.json"), "w") as f:
            json.dump(rules, f)
        with open(os.path.join(tmp, "tests.json"), "w") as f:
            json.dump(tests, f)
        r = subprocess.run([args.promtool, "test", "rules", "tests.json"], cwd=tmp, capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
