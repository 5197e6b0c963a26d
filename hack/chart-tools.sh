#!/usr/bin/env bash
# The chart tools on one PATH dir, built when missing; prints that dir:
#   helm  (Helm 3: helm lint, and the helm ct calls)
#   helm4 (Helm 4: render parity)
#   ct    (chart-testing; its default lint rules and Chart.yaml schema are
#          in ../ct-etc beside the dir)
# Each is a `tool` directive of its own module under hack/tools (helm3,
# helm4, ct): hack/build-tools.sh builds it, keyed by that module's go.mod
# and go.sum, with link flags that make it print the version go.mod pins.
# yamllint (used by ct) comes from Debian. `chart-tools.sh helm4` builds one.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
GO=${GO:-go}

want=${*:-helm helm4 ct yamllint}
links=() etc=
for t in $want; do
  case $t in
  helm | helm4 | ct)
    bin=$(bash "$HACK/build-tools.sh" "$t" | tail -n1)
    links+=("$t=$bin/$t")
    if [ "$t" = ct ]; then
      etc=$(cd "$HACK/tools/ct" && GOWORK=off GOFLAGS=-mod=readonly "$GO" mod download -json github.com/helm/chart-testing/v3 |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
      [ -n "$etc" ] || { echo "chart-tools: no module dir for chart-testing" >&2; exit 1; }
      etc=$etc/etc
    fi ;;
  yamllint)
    if ! command -v yamllint >/dev/null 2>&1; then
      echo "chart-tools: installing yamllint" >&2
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq >&2
      apt-get install -y -qq --no-install-recommends yamllint >/dev/null
    fi ;;
  *) echo "chart-tools: unknown tool $t" >&2; exit 2 ;;
  esac
done

# The dir is named by what it links to, and made whole then renamed into
# place: a caller never sees it half made, and callers with other pins
# (another checkout) get a dir of their own.
key=$(printf '%s\n' "${links[@]}" "etc=$etc" | sha256sum | cut -c1-16)
dir=$CACHE/chart-tools/$key
if [ ! -d "$dir" ]; then
  mkdir -p "$CACHE/chart-tools"
  tmp=$(mktemp -d "$CACHE/chart-tools/.new-XXXXXX")
  chmod 755 "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  mkdir "$tmp/bin"
  for l in "${links[@]}"; do ln -s "${l#*=}" "$tmp/bin/${l%%=*}"; done
  [ -z "$etc" ] || ln -s "$etc" "$tmp/ct-etc"
  mv -T "$tmp" "$dir" 2>/dev/null || true # another caller made it first
fi
echo "$dir/bin"
