#!/usr/bin/env bash
# Builds the Go tools pinned by `tool` directives in modules of their own
# (kept apart so the product's go.mod never links them):
#
#   hack/build-tools.sh [tool...]
#
# Release tools, module hack/tools: crane cosign registry helm-docs (the
# default: all four). The linter, module hack/lint: golangci-lint. It has a
# module of its own because its dependency graph would move the versions
# the release tools share with it (golang.org/x/..., cloud.google.com/...).
# The chart tools, one module each: helm (Helm 3, hack/tools/helm3), helm4
# (hack/tools/helm4), ct (hack/tools/ct); hack/chart-tools.sh puts them on
# one PATH dir. Their graphs disagree (k8s.io/* differ between Helm 3 and 4,
# ct links Helm 3 v3.18 as a library, helm-docs v3.15), and one module would
# build each against versions it was not released with. The kind CLI comes
# from e2e/go.mod, the module that links kind as a library, so the CLI and
# the library are one version (hack/kind-cli.sh).
# Binaries are static and land in $MESH_CNI_CACHE/<set>/<key>/bin, where
# <set> names the module and <key> hashes the Go version, the build flags
# (the version link flags included) and the module's go.mod and go.sum:
# bumping a pin builds a fresh set, nothing is installed by hand. One call
# builds tools of one module. The last line of stdout is that directory:
# bin=$(hack/build-tools.sh crane | tail -n1). Logs go to stderr.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
GO=${GO:-go}

declare -A pkg=(
  [crane]=github.com/google/go-containerregistry/cmd/crane
  [cosign]=github.com/sigstore/cosign/v2/cmd/cosign
  [registry]=github.com/distribution/distribution/v3/cmd/registry
  [helm-docs]=github.com/norwoodj/helm-docs/cmd/helm-docs
  [golangci-lint]=github.com/golangci/golangci-lint/v2/cmd/golangci-lint
  [helm]=helm.sh/helm/v3/cmd/helm
  [helm4]=helm.sh/helm/v4/cmd/helm
  [ct]=github.com/helm/chart-testing/v3/ct
  [kind]=sigs.k8s.io/kind
)
# The module (from the repo root) and cache set of each tool; the default
# is hack/tools.
declare -A mod=([golangci-lint]=hack/lint [helm]=hack/tools/helm3 [helm4]=hack/tools/helm4
  [ct]=hack/tools/ct [kind]=e2e)
declare -A set=([hack/tools]=release-tools [hack/lint]=lint-tools [hack/tools/helm3]=helm3
  [hack/tools/helm4]=helm4 [hack/tools/ct]=ct [e2e]=kind-cli)
all=(crane registry cosign helm-docs)

log() { echo "build-tools: $*" >&2; }
die() { log "error: $*"; exit 1; }

want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${all[@]}")
modname=
for t in "${want[@]}"; do
  [ -n "${pkg[$t]:-}" ] || die "unknown tool $t (known: ${all[*]} golangci-lint helm helm4 ct kind)"
  m=${mod[$t]:-hack/tools}
  [ -z "$modname" ] || [ "$modname" = "$m" ] ||
    die "$t is pinned in $m, ${want[0]} in $modname: build them in two calls"
  modname=$m
done
MOD=$ROOT/$modname
command -v "$GO" >/dev/null || die "go is not installed"

export GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=0 GO111MODULE=on GOTOOLCHAIN=local

# version MODULE: the version the tool module requires (go.mod is the pin).
version() { (cd "$MOD" && "$GO" list -mod=readonly -m -f '{{.Version}}' "$1") || die "no version of $1 in $modname"; }
# The link flags that make a tool print its own version; Helm 3 also takes
# its default Kubernetes version (helm lint, helm template without
# --kube-version) from them, else it assumes 1.20.
declare -A ldflags=()
case $modname in
hack/tools/helm3)
  h=helm.sh/helm/v3 v=$(version $h)
  ldflags[helm]="-X $h/internal/version.version=$v -X $h/pkg/chartutil.k8sVersionMajor=1 \
-X $h/pkg/chartutil.k8sVersionMinor=34 -X $h/pkg/lint/rules.k8sVersionMajor=1 -X $h/pkg/lint/rules.k8sVersionMinor=34" ;;
hack/tools/helm4) ldflags[helm4]="-X helm.sh/helm/v4/internal/version.version=$(version helm.sh/helm/v4)" ;;
hack/tools/ct) ldflags[ct]="-X github.com/helm/chart-testing/v3/ct/cmd.Version=$(version github.com/helm/chart-testing/v3)" ;;
esac

key=$(
  {
    echo "CGO_ENABLED=0 -trimpath -ldflags=-s -w"
    for t in $(printf '%s\n' "${!ldflags[@]}" | sort); do echo "$t ${ldflags[$t]}"; done
    "$GO" env GOVERSION
    cd "$MOD" && sha256sum go.mod go.sum
  } | sha256sum | cut -c1-16
)
ROOT="$CACHE/${set[$modname]}/$key"
BIN="$ROOT/bin"
mkdir -p "$BIN"

missing() {
  missing=()
  for t in "${want[@]}"; do
    [ -x "$BIN/$t" ] || missing+=("$t")
  done
}
# A binary is moved into place whole once built, so one that is there is
# ready: no lock needed to use it, even while another tool is being built.
missing
if [ ${#missing[@]} -eq 0 ]; then
  echo "$BIN"
  exit 0
fi
# One build at a time per key: a second caller waits, then finds them built.
exec 9>"$ROOT/.lock"
flock 9
missing

out=$(mktemp -d "$ROOT/.out-XXXXXX")
trap 'rm -rf "$out"' EXIT
for t in "${missing[@]}"; do
  start=$SECONDS
  (cd "$MOD" && nice -n 10 "$GO" build -mod=readonly -trimpath -ldflags "-s -w ${ldflags[$t]:-}" -o "$out/$t" "${pkg[$t]}") ||
    die "building $t failed"
  mv "$out/$t" "$BIN/$t"
  log "built $t in $((SECONDS - start))s ($(du -h "$BIN/$t" | cut -f1))"
done
echo "$BIN"
