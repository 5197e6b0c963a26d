#!/usr/bin/env bash
# helm lint --strict (defaults and every ci values file) and ct lint, offline.
# Tools come from hack/chart-tools.sh. ct wants a git work tree with the
# target branch; a fresh clone of any branch gets a local "main" for it.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=$(bash hack/chart-tools.sh helm ct yamllint)
export PATH="$TOOLS:$PATH"
CHART=charts/mesh-cni

helm lint --strict "$CHART"
for f in "$CHART"/ci/*-values.yaml; do
  helm lint --strict --quiet "$CHART" -f "$f" >/dev/null || {
    helm lint --strict "$CHART" -f "$f"
    exit 1
  }
done
echo "chart-lint: helm lint --strict passed for defaults and $(ls "$CHART"/ci/*-values.yaml | wc -l) ci values files"

if ! git rev-parse --verify -q refs/heads/main >/dev/null &&
  ! git rev-parse --verify -q refs/remotes/origin/main >/dev/null; then
  git branch main HEAD
fi
ETC=$(dirname "$TOOLS")/ct-etc
ct lint --config ct.yaml --charts "$CHART" \
  --lint-conf "$ETC/lintconf.yaml" --chart-yaml-schema "$ETC/chart_schema.yaml"
