#!/usr/bin/env bash
# make release: builds, publishes and signs a release of VERSION in an OCI
# registry, without a Docker daemon:
#
#   REGISTRY=host:port [OUT=dir] [COSIGN_KEY=cosign.key] hack/release.sh
#
#  - static binaries for linux/amd64 and linux/arm64, stamped with VERSION
#    and the git commit (OUT/bin/linux-<arch>/);
#  - the image REGISTRY/mesh-cni:VERSION, an OCI image index for both
#    platforms, each holding the binaries at / as the Dockerfile's image does
#    (entrypoint /mesh-cni-agent, user 0:0), assembled with crane;
#  - an SPDX SBOM per platform image (OUT/sbom/), attached to it as a signed
#    cosign attestation;
#  - the chart (version VERSION without "v", appVersion VERSION, the image
#    pinned by digest in the packaged values.yaml; the source chart is not
#    changed) pushed to oci://REGISTRY/charts;
#  - cosign signatures on the index and the chart (COSIGN_KEY, or a key pair
#    made in OUT/cosign with an empty password when unset);
#  - the kubectl plugin: per platform a tarball of the CLI as
#    kubectl-mesh_cni, and the krew manifest naming them (OUT/krew/,
#    hack/krew.sh; KREW_URI_BASE is where the tarballs are published);
#  - OUT/release.env: what was published, by digest.
#
# Without REGISTRY a registry is started on 127.0.0.1 for the run, its
# storage kept in OUT/registry (serve it again with the same config, see
# docs/release.md). Plain HTTP is only for loopback registries.
# CHANGELOG.md must have a "## [VERSION]" entry. Tools come from
# hack/build-tools.sh and hack/chart-tools.sh (built once, cached).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
GO=${GO:-go}
VERSION=${VERSION:-$(cat VERSION)}
COMMIT=${COMMIT:-$(bash hack/commit.sh)}
OUT=${OUT:-$ROOT/_out/release/$VERSION}
ARCHES=(amd64 arm64)
BINARIES=(mesh-cni:./plugin mesh-cni-podget:./cmd/mesh-cni-podget mesh-cni-agent:./installer
  mesh-cni-validator:./cmd/mesh-cni-validator mesh-cni-metrics-proxy:./cmd/mesh-cni-metrics-proxy mesh-cnictl:./cmd/mesh-cnictl)

log() { echo "release: $*" >&2; }
die() { log "error: $*"; exit 1; }

# `release.sh compile`: compile every binary for every platform into Go's
# build cache, and the SBOM writer, then stop. make test runs it before the
# releases it makes, so that none of them compiles a platform from nothing
# inside a test's time limit.
if [ "${1:-}" = compile ]; then
  pkgs=()
  for b in "${BINARIES[@]}"; do pkgs+=("${b#*:}"); done
  for arch in "${ARCHES[@]}"; do
    GOOS=linux GOARCH=$arch CGO_ENABLED=0 GOFLAGS=-buildvcs=false "$GO" build -trimpath "${pkgs[@]}" ||
      die "compiling for linux/$arch"
  done
  "$GO" build -o /dev/null ./hack/sbom || die "compiling hack/sbom"
  log "compiled ${#BINARIES[@]} binaries for ${ARCHES[*]}"
  exit 0
fi

[[ $VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "VERSION $VERSION is not vMAJOR.MINOR.PATCH[-pre]"
grep -q "^## \[$VERSION\]" CHANGELOG.md || die "CHANGELOG.md has no \"## [$VERSION]\" entry"

tools=$(bash hack/build-tools.sh crane cosign registry | tail -n1)
helm=$(bash hack/chart-tools.sh helm | tail -n1)/helm
crane=$tools/crane
cosign=$tools/cosign
rm -rf "$OUT/bin" "$OUT/sbom" "$OUT/chart" "$OUT/layers" "$OUT/krew" "$OUT/release.env.tmp"
mkdir -p "$OUT"/{bin,sbom,chart,layers}

# The registry: the given one, or ours for this run.
if [ -z "${REGISTRY:-}" ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  REGISTRY=127.0.0.1:$port
  mkdir -p "$OUT/registry"
  printf 'version: 0.1\nlog: {level: warn}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: %s}\n' \
    "$OUT/registry/data" "$REGISTRY" >"$OUT/registry/config.yml"
  "$tools/registry" serve "$OUT/registry/config.yml" >"$OUT/registry/log" 2>&1 &
  regpid=$!
  trap 'kill $regpid 2>/dev/null || true' EXIT
  for _ in $(seq 100); do
    curl -fsS "http://$REGISTRY/v2/" >/dev/null 2>&1 && break
    sleep 0.1
  done
  log "started a registry at $REGISTRY (storage $OUT/registry/data)"
fi
case $REGISTRY in
127.*|localhost:*|localhost) plain=(--plain-http) ;;
*) plain=() ;;
esac

# Signing key: the caller's, or a fresh pair (empty password) for this run.
export COSIGN_PASSWORD=${COSIGN_PASSWORD:-}
if [ -z "${COSIGN_KEY:-}" ]; then
  mkdir -p "$OUT/cosign"
  if [ ! -f "$OUT/cosign/cosign.key" ]; then
    (cd "$OUT/cosign" && "$cosign" generate-key-pair >/dev/null 2>&1) || die "cosign generate-key-pair failed"
  fi
  COSIGN_KEY=$OUT/cosign/cosign.key
fi
# The signing key's fingerprint for Artifact Hub: sha256 of the public key.
key_fingerprint=$(sha256sum "${COSIGN_KEY%.key}.pub" | cut -c1-64)
# Offline: no transparency log; real releases sign keyless (docs/release.md).
sign=("$cosign" sign --yes --key "$COSIGN_KEY" --tlog-upload=false)

ldflags="-s -w -X github.com/mesh-cni/mesh-cni/internal/version.Version=$VERSION -X github.com/mesh-cni/mesh-cni/internal/version.Commit=$COMMIT"
# Layer timestamps and the SBOM's creation time are the commit's, so a
# rebuild of the same commit gives the same layers.
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

# Not niced: under nice a release (TestRelease's among them) waits behind
# every process at normal priority, so its time would depend on the
# machine's other work.
manifests=()
for arch in "${ARCHES[@]}"; do
  dir=$OUT/bin/linux-$arch
  for b in "${BINARIES[@]}"; do
    GOOS=linux GOARCH=$arch CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
      "$GO" build -trimpath -ldflags "$ldflags" -o "$dir/${b%%:*}" "${b#*:}" || die "building ${b%%:*} for $arch"
  done
  log "built linux/$arch binaries ($(du -sh "$dir" | cut -f1))"
  layer=$OUT/layers/linux-$arch.tar
  tar -C "$dir" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf "$layer" .
  ref=$REGISTRY/mesh-cni:$VERSION-linux-$arch
  "$crane" append --oci-empty-base -f "$layer" -t "$ref" >/dev/null
  "$crane" mutate --set-platform "linux/$arch" --entrypoint /mesh-cni-agent --user 0:0 \
    -l "org.opencontainers.image.version=$VERSION" -l "org.opencontainers.image.revision=$COMMIT" \
    -l "org.opencontainers.image.source=https://github.com/mesh-cni/mesh-cni" "$ref" -t "$ref" >/dev/null
  digest=$("$crane" digest "$ref")
  manifests+=(-m "$REGISTRY/mesh-cni@$digest")
  echo "IMAGE_DIGEST_${arch^^}=$digest" >>"$OUT/release.env.tmp"

  sbom=$OUT/sbom/mesh-cni-$VERSION-linux-$arch.spdx.json
  "$GO" run ./hack/sbom -name mesh-cni -version "$VERSION" -platform "linux/$arch" -created "$created" "$dir"/* >"$sbom"
  "$cosign" attest --yes --key "$COSIGN_KEY" --tlog-upload=false --type spdxjson --predicate "$sbom" \
    "$REGISTRY/mesh-cni@$digest" >/dev/null 2>&1 || die "cosign attest of the linux/$arch SBOM failed"
done
EPOCH=$epoch bash hack/krew.sh "$VERSION" "$OUT/krew" "$OUT/bin" ${KREW_URI_BASE:+"$KREW_URI_BASE"}
log "wrote the kubectl plugin's tarballs and krew manifest in $OUT/krew"
image=$REGISTRY/mesh-cni:$VERSION
"$crane" index append "${manifests[@]}" -t "$image" >/dev/null
image_digest=$("$crane" digest "$image")
"${sign[@]}" "$REGISTRY/mesh-cni@$image_digest" >/dev/null 2>&1 || die "cosign sign of $image failed"
log "pushed and signed $image@$image_digest"

# The chart: a copy with the release's version and the image by digest.
src=$OUT/chart/src/mesh-cni
mkdir -p "$(dirname "$src")" && cp -r charts/mesh-cni "$src"
chart_version=${VERSION#v}
sed -i -e "s|^version: .*|version: $chart_version|" -e "s|^appVersion: .*|appVersion: $VERSION|" \
  -e "s|image: mesh-cni:.*|image: $REGISTRY/mesh-cni:$VERSION@$image_digest|" \
  -e "s|fingerprint: .*|fingerprint: $key_fingerprint|" -e "s|/download/v[^/]*/cosign.pub|/download/$VERSION/cosign.pub|" "$src/Chart.yaml"
# Only the top-level image: block's repository and digest.
sed -i -e "/^image:/,/^[^ #]/{s|^  repository: .*|  repository: $REGISTRY/mesh-cni|;s|^  digest: .*|  digest: \"$image_digest\"|}" "$src/values.yaml"
grep -q "^  digest: \"$image_digest\"" "$src/values.yaml" || die "could not pin the digest in the chart's values.yaml"
"$helm" package "$src" -d "$OUT/chart" >/dev/null
tgz=$OUT/chart/mesh-cni-$chart_version.tgz
push=$("$helm" push "$tgz" "oci://$REGISTRY/charts" "${plain[@]}" 2>&1) || die "helm push: $push"
chart_digest=$(sed -n 's/^Digest: //p' <<<"$push")
[ -n "$chart_digest" ] || die "helm push printed no digest: $push"
"${sign[@]}" "$REGISTRY/charts/mesh-cni@$chart_digest" >/dev/null 2>&1 || die "cosign sign of the chart failed"
log "pushed and signed oci://$REGISTRY/charts/mesh-cni:$chart_version@$chart_digest"

{
  echo "VERSION=$VERSION"
  echo "COMMIT=$COMMIT"
  echo "REGISTRY=$REGISTRY"
  echo "IMAGE=$image"
  echo "IMAGE_DIGEST=$image_digest"
  cat "$OUT/release.env.tmp"
  echo "CHART=oci://$REGISTRY/charts/mesh-cni"
  echo "CHART_VERSION=$chart_version"
  echo "CHART_DIGEST=$chart_digest"
  echo "COSIGN_PUB=${COSIGN_KEY%.key}.pub"
  echo "KREW_MANIFEST=$OUT/krew/mesh-cni.yaml"
} >"$OUT/release.env"
rm -f "$OUT/release.env.tmp"
cat "$OUT/release.env"
