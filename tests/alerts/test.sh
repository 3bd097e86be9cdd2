#!/usr/bin/env bash
# The chart's alerts under `promtool`: renders the PrometheusRule with helm,
# checks the rules, and runs the unit tests in rules_test.yaml (each alert
# fires on a sustained problem and stays quiet on a passing one).
#
#   HELM=/path/to/helm tests/alerts/test.sh     # helm: tests/chart.sh installs one
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/../.." && pwd)
STATE=${NODEIMAGE_STATE:-$REPO_ROOT/.state}
HELM=${HELM:-$STATE/bin/helm}
command -v promtool >/dev/null || { echo "promtool is missing (Debian package prometheus)"; exit 1; }
[[ -x $HELM ]] || { echo "helm is missing at $HELM (tests/chart.sh installs it)"; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$HELM" template nodeimage "$REPO_ROOT/charts/nodeimage" -n nodeimage-system \
  --set prometheusRule.enabled=true \
  --set controller.image.repository=registry.example.com/nodeimage-controller \
  --set daemon.image.repository=registry.example.com/nodeimage-daemon \
  --show-only templates/prometheusrule.yaml >"$WORK/rule.yaml"
# A PrometheusRule's spec is a Prometheus rule file: everything under
# "spec:", one indentation level less.
sed -n '/^spec:/,$p' "$WORK/rule.yaml" | sed '1d; s/^  //' >"$WORK/rules.yaml"
cp "$HERE/rules_test.yaml" "$WORK/"
promtool check rules "$WORK/rules.yaml"
promtool test rules "$WORK/rules_test.yaml"
