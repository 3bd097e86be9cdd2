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
# render OUT NAMESPACE [helm flags...]: the rule file of the chart's
# PrometheusRule. (A PrometheusRule's spec is a Prometheus rule file:
# everything under "spec:", one indentation level less.)
render() {
  local out=$1 ns=$2
  shift 2
  "$HELM" template nodeimage "$REPO_ROOT/charts/nodeimage" -n "$ns" \
    --set prometheusRule.enabled=true \
    --set controller.image.repository=registry.example.com/nodeimage-controller \
    --set daemon.image.repository=registry.example.com/nodeimage-daemon \
    --show-only templates/prometheusrule.yaml "$@" >"$WORK/rule.yaml"
  sed -n '/^spec:/,$p' "$WORK/rule.yaml" | sed '1d; s/^  //' >"$WORK/$out"
}
render rules.yaml nodeimage-system
cp "$HERE/rules_test.yaml" "$HERE/rules_override_test.yaml" "$WORK/"
promtool check rules "$WORK/rules.yaml"
promtool test rules "$WORK/rules_test.yaml"
# The same rules for a release with other names: the alerts follow them.
render rules_override.yaml prepull --set fullnameOverride=edge-prepull
promtool test rules "$WORK/rules_override_test.yaml"
