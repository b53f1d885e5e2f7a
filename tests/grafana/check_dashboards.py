#!/usr/bin/env python3
"""Static checks of the Grafana dashboards in grafana/dashboards/*.json (ctest: grafana_dashboards).

For every dashboard:
  - it is valid JSON with a unique uid and unique panel ids;
  - it is importable: `__inputs` declares the datasource input DS_PROMETHEUS (pluginId prometheus),
    and every panel and target refers to its datasource as ${DS_PROMETHEUS}, never by a fixed uid;
  - it is provisionable: a datasource template variable named DS_PROMETHEUS resolves ${DS_PROMETHEUS}
    when Grafana loads the file from grafana/provisioning (where __inputs is ignored), and the
    provisioned Prometheus datasource is the default one;
  - an `instance` query variable (multi, with All = .*) exists, and every metric selector of every
    target's PromQL carries instance=~"$instance";
  - every metric a target queries is listed in docs/metrics.md (histogram series as name + _bucket,
    _sum or _count), or is Prometheus' own `up`.
Runs with the standard library only:  /usr/bin/python3 tests/grafana/check_dashboards.py [--repo DIR]
"""
import argparse
import glob
import json
import os
import re
import sys

DS_INPUT = "DS_PROMETHEUS"
DS_REF = "${%s}" % DS_INPUT
INSTANCE_MATCHER = 'instance=~"$instance"'
PROMETHEUS_BUILTIN = {"up"}  # series Prometheus adds itself for every target
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# PromQL words that are not metric names when they are not followed by "(": operators and modifiers.
# Aggregations are listed too: in `sum by (x) (...)` the "(" does not follow the name.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "atan2", "inf", "nan",
            "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
            "topk", "quantile", "limitk", "limit_ratio"}
LABEL_LIST_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}

TOKEN = re.compile(r'''
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<var>\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)
  | (?P<lbrace>\{)
  | (?P<rbrace>\})
  | (?P<lparen>\()
  | (?P<rparen>\))
  | (?P<space>\s+)
  | (?P<other>.)
''', re.X | re.S)


def selectors(expr):
    """[(metric name, label matcher text or None)] of every vector selector in a PromQL expression."""
    tokens = [(m.lastgroup, m.group()) for m in TOKEN.finditer(expr) if m.lastgroup != "space"]
    out, i = [], 0
    while i < len(tokens):
        kind, text = tokens[i]
        if kind == "ident" and text in LABEL_LIST_WORDS:
            i += 1
            if i < len(tokens) and tokens[i][0] == "lparen":  # skip the label list
                while i < len(tokens) and tokens[i][0] != "rparen":
                    i += 1
            i += 1
            continue
        if kind == "ident":
            nxt = tokens[i + 1] if i + 1 < len(tokens) else (None, None)
            if nxt[0] == "lparen" or text.lower() in KEYWORDS:
                i += 1  # a function or aggregation, or an operator word
                continue
            if nxt[0] == "lbrace":
                j = i + 2
                while j < len(tokens) and tokens[j][0] != "rbrace":
                    j += 1
                out.append((text, "".join(t for _, t in tokens[i + 2:j])))
                i = j + 1
                continue
            out.append((text, None))
        elif kind == "lbrace":  # {__name__=...} without a name: not used by the dashboards
            raise ValueError(f"selector without a metric name in: {expr}")
        i += 1
    return out


def documented_metrics(metrics_md):
    """{name: type} of the table rows `| `zipmoe_...` | type | ...` in docs/metrics.md."""
    rows = re.findall(r"^\| `([a-z_:][a-z0-9_:]*)` \| ([a-z]+)", open(metrics_md, encoding="utf-8").read(), re.M)
    return dict(rows)


def known_metric(name, documented):
    if name in documented or name in PROMETHEUS_BUILTIN:
        return True
    for suffix in HISTOGRAM_SUFFIXES:
        base = name[: -len(suffix)]
        if name.endswith(suffix) and documented.get(base) in ("histogram", "summary"):
            return True
    return False


def panels(items):
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def check_dashboard(path, documented, errors):
    def err(msg):
        errors.append(f"{os.path.relpath(path)}: {msg}")

    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        err(f"not valid JSON: {e}")
        return None
    if not isinstance(d, dict) or not d.get("uid") or not d.get("title"):
        err("no uid or title")
        return None

    inputs = [x for x in d.get("__inputs", []) if x.get("name") == DS_INPUT]
    if not inputs or inputs[0].get("type") != "datasource" or inputs[0].get("pluginId") != "prometheus":
        err(f"__inputs has no datasource input {DS_INPUT} with pluginId prometheus")
    text = json.dumps(d)
    if "zipmoe-prometheus" in text:
        err("refers to the provisioned datasource uid zipmoe-prometheus; use " + DS_REF)

    variables = {v.get("name"): v for v in d.get("templating", {}).get("list", [])}
    ds_var = variables.get(DS_INPUT)
    if not ds_var or ds_var.get("type") != "datasource" or ds_var.get("query") != "prometheus":
        err(f"no datasource template variable {DS_INPUT} (type datasource, query prometheus): "
            "provisioned dashboards need it to resolve " + DS_REF)
    inst = variables.get("instance")
    if not inst or inst.get("type") != "query":
        err("no `instance` query template variable")
    else:
        if (inst.get("datasource") or {}).get("uid") != DS_REF:
            err(f"variable instance: datasource is not {DS_REF}")
        if not inst.get("includeAll") or inst.get("allValue") != ".*" or not inst.get("multi"):
            err("variable instance: needs multi, includeAll and allValue '.*'")
        q = inst.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        m = re.match(r"label_values\((\w+).*,\s*instance\)$", q.strip())
        if not m or not known_metric(m.group(1), documented):
            err(f"variable instance: query '{q}' is not label_values(<documented metric>, instance)")

    ids, n_targets = set(), 0
    for p in panels(d.get("panels", [])):
        title = p.get("title", "?")
        if p.get("id") in ids:
            err(f"panel id {p.get('id')} used twice")
        ids.add(p.get("id"))
        if p.get("type") != "row" and (p.get("datasource") or {}).get("uid") != DS_REF:
            err(f"panel '{title}': datasource is not {DS_REF}")
        for t in p.get("targets", []):
            n_targets += 1
            where = f"panel '{title}' target {t.get('refId', '?')}"
            if (t.get("datasource") or {}).get("uid") != DS_REF:
                err(f"{where}: datasource is not {DS_REF}")
            expr = t.get("expr", "")
            if not expr.strip():
                err(f"{where}: no expr")
                continue
            try:
                found = selectors(expr)
            except ValueError as e:
                err(f"{where}: {e}")
                continue
            if not found:
                err(f"{where}: no metric in '{expr}'")
            for name, matchers in found:
                if not known_metric(name, documented):
                    err(f"{where}: metric {name} is not in docs/metrics.md")
                if matchers is None or INSTANCE_MATCHER not in matchers:
                    err(f"{where}: selector {name}{{{matchers or ''}}} lacks {INSTANCE_MATCHER}")
    if n_targets == 0:
        err("no queries")
    return d


def self_test(documented):
    """The PromQL scan on known answers, so that a broken scan cannot pass every dashboard."""
    expr = ('sum by (pool, instance) (rate(zipmoe_a_total{pool!="M", instance=~"$instance"}[$__rate_interval]))\n'
            '  / ignoring(pool) group_left sum(rate(zipmoe_a_total[5m])) + on(x) 1e-3 * '
            'histogram_quantile(0.95, sum by (le) (rate(zipmoe_b_seconds_bucket{le!="+Inf"}[1m]))) or up')
    got = selectors(expr)
    want = [("zipmoe_a_total", 'pool!="M",instance=~"$instance"'), ("zipmoe_a_total", None),
            ("zipmoe_b_seconds_bucket", 'le!="+Inf"'), ("up", None)]
    assert got == want, got
    docs = {"zipmoe_b_seconds": "histogram", "zipmoe_c_total": "counter"}
    assert known_metric("zipmoe_b_seconds_bucket", docs) and known_metric("up", docs)
    assert not known_metric("zipmoe_c_total_bucket", docs) and not known_metric("zipmoe_d", docs)
    assert "zipmoe_bad_messages_total" in documented, "docs/metrics.md table not found"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    args = ap.parse_args()
    repo = os.path.abspath(args.repo)
    documented = documented_metrics(os.path.join(repo, "docs", "metrics.md"))
    self_test(documented)

    errors = []
    files = sorted(glob.glob(os.path.join(repo, "grafana", "dashboards", "*.json")))
    if not files:
        errors.append("no dashboards in grafana/dashboards/")
    uids = {}
    for f in files:
        d = check_dashboard(f, documented, errors)
        if d is not None:
            if d["uid"] in uids:
                errors.append(f"{f}: uid {d['uid']} also used by {uids[d['uid']]}")
            uids[d["uid"]] = f

    # Provisioning: the datasource variable picks the default Prometheus datasource, so the
    # provisioned one must be it; the provider must load the folder compose.yaml mounts.
    ds_yaml = open(os.path.join(repo, "grafana", "provisioning", "datasources", "prometheus.yaml")).read()
    if not re.search(r"^\s*type:\s*prometheus\s*$", ds_yaml, re.M) or not re.search(r"^\s*isDefault:\s*true\s*$", ds_yaml, re.M):
        errors.append("grafana/provisioning/datasources/prometheus.yaml: no default prometheus datasource")
    provider = open(os.path.join(repo, "grafana", "provisioning", "dashboards", "zipmoe.yaml")).read()
    if "/var/lib/grafana/dashboards" not in provider:
        errors.append("grafana/provisioning/dashboards/zipmoe.yaml: does not load /var/lib/grafana/dashboards")

    for e in errors:
        print("FAIL " + e)
    print(f"{len(files)} dashboard(s), {len(documented)} documented metrics, {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
