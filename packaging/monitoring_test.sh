#!/usr/bin/env bash
# Checks the monitoring files shipped in packaging/monitoring/:
#
#   monitoring_test.sh SOURCE_DIR check-rules  # promtool check rules, of
#                                              # the rules and of the
#                                              # dashboard's queries
#   monitoring_test.sh SOURCE_DIR test-rules   # promtool test rules (the
#                                              # alerts' unit tests)
#   monitoring_test.sh SOURCE_DIR names        # the dashboard is JSON, and
#                                              # every metric the rules and
#                                              # the dashboard read is one
#                                              # tallyd exports
#
# promtool, as for the metrics check of tests/watching_test.cc: the one
# TALLY_PROMTOOL names, which makes the check required (it fails when that
# promtool cannot run; scripts/fetch-promtool.sh provides one and
# scripts/test.sh sets it); without TALLY_PROMTOOL, /usr/bin/promtool when the
# machine has Debian's `prometheus` package, else the check is skipped
# (exit 77, which ctest reports as skipped).
#
# The metrics tallyd exports are the rows of docs/reference/metrics.md,
# generated from the status table that drives /metrics (it says which are
# histograms: those also with _bucket, _sum and _count). `up` is the one
# other series the rules read: Prometheus records it for every target.
set -euo pipefail
src=${1:?usage: monitoring_test.sh SOURCE_DIR check-rules|test-rules|names}
mode=${2:?usage: monitoring_test.sh SOURCE_DIR check-rules|test-rules|names}
dir=$src/packaging/monitoring
rules=$dir/tally-alerts.yml
tests=$dir/tally-alerts.test.yml
dashboard=$dir/tally-dashboard.json

promtool() {
  local tool
  if [ -n "${TALLY_PROMTOOL:-}" ]; then
    tool=$TALLY_PROMTOOL
    if ! [ -x "$tool" ] || ! "$tool" --version > /dev/null 2>&1; then
      echo "monitoring_test: TALLY_PROMTOOL=$tool does not run: the promtool check cannot be skipped (scripts/fetch-promtool.sh provides it)" >&2
      exit 1
    fi
  elif [ -x /usr/bin/promtool ]; then
    tool=/usr/bin/promtool
  else
    echo "monitoring_test: SKIPPED: no promtool (set TALLY_PROMTOOL, e.g. to the output of scripts/fetch-promtool.sh, or install Debian's prometheus package)"
    exit 77
  fi
  "$tool" "$@"
}

case "$mode" in
  check-rules)
    promtool check rules "$rules"
    # The dashboard's queries, as recording rules, so that promtool parses
    # them too (Grafana's variables replaced by values they take).
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python3 - "$dashboard" > "$tmp/dashboard-queries.yml" <<'EOF'
import json, re, sys
exprs = []
def walk(node):
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str):
            exprs.append(node["expr"])
        for v in node.values():
            walk(v)
    elif isinstance(node, list):
        for v in node:
            walk(v)
walk(json.load(open(sys.argv[1], encoding="utf-8")))
rules = []
for i, e in enumerate(exprs):
    e = e.replace("$__rate_interval", "5m").replace("$instance", ".*")
    rules.append({"record": "tally_dashboard:query_%d" % (i + 1), "expr": e})
# JSON is YAML.
print(json.dumps({"groups": [{"name": "tally-dashboard", "rules": rules}]}, indent=1))
EOF
    promtool check rules "$tmp/dashboard-queries.yml"
    ;;
  test-rules)
    # rule_files in the test file are relative to it.
    promtool test rules "$tests"
    ;;
  names)
    python3 -m json.tool "$dashboard" > /dev/null ||
      { echo "monitoring_test: $dashboard is not valid JSON" >&2; exit 1; }
    python3 - "$src" "$rules" "$dashboard" <<'EOF'
import json, os, re, sys

src, rules_path, dashboard_path = sys.argv[1:4]

exported = set()
histograms = set()
# What tallyd exports: the metrics reference, generated from the status
# table that drives /metrics (ReferenceDocIsCurrent keeps it current).
reference = os.path.join(src, "docs", "reference", "metrics.md")
with open(reference, encoding="utf-8") as f:
    for m in re.finditer(r'^\| `((?:tally|process)_[a-z0-9_]+)` \| (\w+) \|', f.read(), re.M):
        exported.add(m.group(1))
        if m.group(2) == "histogram":
            histograms.add(m.group(1))
for h in histograms:
    exported.update(h + s for s in ("_bucket", "_sum", "_count"))
if len(exported) < 20:
    sys.exit(f"monitoring_test: found only {len(exported)} metric names in {reference}; "
             "its table has changed shape and this check must follow it")
exported.add("up")  # recorded by Prometheus for every scrape target

# The expressions: every `expr:` of the rules (a block scalar or one
# line), every target's `expr` and every query variable of the dashboard.
exprs = []
lines = open(rules_path, encoding="utf-8").read().split("\n")
i = 0
while i < len(lines):
    m = re.match(r"^(\s*)expr:\s*(.*)$", lines[i])
    if m:
        indent, rest = len(m.group(1)), m.group(2).strip()
        if rest in ("|", ">", "|-", ">-"):
            block = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or
                                      len(lines[i]) - len(lines[i].lstrip()) > indent):
                block.append(lines[i])
                i += 1
            exprs.append(("rules", "\n".join(block)))
            continue
        exprs.append(("rules", rest.strip("'\"")))
    i += 1
def walk(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("expr", "definition") and isinstance(v, str):
                exprs.append(("dashboard", v))
            elif k == "query" and isinstance(v, dict) and isinstance(v.get("query"), str):
                exprs.append(("dashboard", v["query"]))
            else:
                walk(v)
    elif isinstance(node, list):
        for v in node:
            walk(v)
walk(json.load(open(dashboard_path, encoding="utf-8")))
if not any(w == "rules" for w, _ in exprs) or not any(w == "dashboard" for w, _ in exprs):
    sys.exit("monitoring_test: found no expressions in the rules or the dashboard")

# The metric names of a PromQL expression: identifiers that are not
# functions (followed by "("), keywords, label names (in {...} or the
# lists after by/without/on/ignoring/group_*), or inside strings, ranges
# and Grafana variables.
keywords = {"and", "or", "unless", "by", "without", "on", "ignoring",
            "group_left", "group_right", "bool", "offset", "inf", "nan"}
def metric_names(expr):
    # Grafana's label_values(METRIC, label): the metric, not the label.
    e = re.sub(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,[^)]*\)", r"\1", expr)
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', e)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"\$\w+", "", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        word = m.group(0)
        after = e[m.end():].lstrip()
        if after.startswith("(") or word.lower() in keywords:
            continue
        if re.fullmatch(r"\d+[smhdwy]", word):
            continue
        names.add(word)
    return names

bad = []
used = set()
for where, expr in exprs:
    names = metric_names(expr)
    used |= names
    for n in sorted(names - exported):
        bad.append(f"{where}: {n} in: {' '.join(expr.split())}")
if bad:
    print("monitoring_test: metrics tallyd does not export:", *bad, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print(f"monitoring_test: {len(exprs)} expressions read {len(used)} metrics, all exported")
EOF
    ;;
  *)
    echo "monitoring_test: unknown mode $mode" >&2
    exit 2
    ;;
esac
