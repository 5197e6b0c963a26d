#!/usr/bin/env bash
# Builds the images the e2e suite installs Istio from (label istio-real) and
# saves them into one tarball for kind:
#
#   hack/istio-images.sh        istiod and proxyv2 (below)
#   hack/istio-images.sh cni    Istio's CNI node agent alone (label migrate)
#
#   mesh-cni.local/istio/pilot:<key>    FROM scratch, Istio's pilot-discovery
#                                       (istiod), as in Istio's pilot image
#   mesh-cni.local/istio/proxyv2:<key>  FROM scratch, Istio's pilot-agent at
#                                       /usr/local/bin/pilot-agent (as in
#                                       Istio's proxyv2 image) and the test
#                                       proxy as the entrypoint
#
#   mesh-cni.local/istio/install-cni:<key>  (cni) FROM scratch, Istio's
#                                       install-cni at /usr/local/bin and the
#                                       istio-cni plugin at /opt/cni/bin, the
#                                       paths, PATH, WORKDIR and CMD of Istio's
#                                       cni/deployments/kubernetes/
#                                       Dockerfile.install-cni (lines 21-26)
#
# Istio's base for install-cni (its `base` or distroless `iptables` image,
# same Dockerfile lines 9-16) adds the iptables tools, which only its repair
# and ambient modes run inside the container; the istio-cni plugin runs on
# the node with the node's own tools. So this image serves Istio's chart
# with repair.enabled=false in sidecar mode, as the migrate spec installs it.
#
# Istio's commands come from hack/build-istio.sh (the version pinned in
# hack/istio/go.mod); the test proxy from internal/testsupport/testproxy/. Envoy is not built
# here, so the proxyv2 stand-in runs the test proxy where Istio runs
# pilot-agent and Envoy (`proxy sidecar`) and Istio's pilot-agent for every
# other command, such as istio-validation (internal/testsupport/testproxy/proxyv2.go). Both are
# static binaries; nothing in them needs a shell or host tools
# (istio-validation with --skip-rule-apply only listens and dials).
#
# <key> hashes the three binaries and the Dockerfiles, so the tarball
# $MESH_CNI_CACHE/images/istio-<key>.tar is built once per input. The last
# line of stdout is its path.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
GO=${GO:-go}
HUB=mesh-cni.local/istio

log() { echo "istio-images: $*" >&2; }

mkdir -p "$CACHE/images"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

# save builds the images under $ctx/<name> (a Dockerfile each), tagged
# $HUB/<name>:<key>, into $CACHE/images/<prefix>-<key>.tar unless that is
# there, and prints its path. <key> hashes everything in the contexts.
save() {
  local prefix=$1 img key tar refs=()
  shift
  key=$(cd "$ctx" && for img in "$@"; do sha256sum "$img"/*; done | sha256sum | cut -c1-16)
  tar="$CACHE/images/$prefix-$key.tar"
  exec 9>"$CACHE/images/.istio-images.lock"
  flock 9
  if [ -s "$tar" ]; then
    echo "$tar"
    return
  fi
  bash "$here/docker.sh"
  local start=$SECONDS
  for img in "$@"; do
    DOCKER_BUILDKIT=0 docker build -q -t "$HUB/$img:$key" "$ctx/$img" >/dev/null
    refs+=("$HUB/$img:$key")
  done
  docker save -o "$tar.tmp" "${refs[@]}"
  mv "$tar.tmp" "$tar"
  log "built ${refs[*]} in $((SECONDS - start))s"
  echo "$tar"
}

if [ "${1:-}" = cni ]; then
  istio=$(bash "$here/build-istio.sh" istio-cni install-cni | tail -n1)
  mkdir -p "$ctx/install-cni"
  cp "$istio/istio-cni" "$istio/install-cni" "$ctx/install-cni/"
  cat >"$ctx/install-cni/Dockerfile" <<'EOF'
FROM scratch
COPY istio-cni /opt/cni/bin/istio-cni
COPY install-cni /usr/local/bin/install-cni
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/cni/bin
WORKDIR /opt/cni/bin
CMD ["/usr/local/bin/install-cni"]
EOF
  save istio-cni install-cni
  exit 0
fi

istio=$(bash "$here/build-istio.sh" pilot-discovery pilot-agent | tail -n1)
mkdir -p "$ctx/pilot" "$ctx/proxyv2"
cp "$istio/pilot-discovery" "$ctx/pilot/"
cp "$istio/pilot-agent" "$ctx/proxyv2/"
(cd "$root" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false "$GO" build -trimpath -ldflags '-s -w' -o "$ctx/proxyv2/testproxy" ./internal/testsupport/testproxy)

cat >"$ctx/pilot/Dockerfile" <<'EOF'
FROM scratch
COPY pilot-discovery /usr/local/bin/pilot-discovery
USER 1337:1337
ENTRYPOINT ["/usr/local/bin/pilot-discovery"]
EOF
cat >"$ctx/proxyv2/Dockerfile" <<'EOF'
FROM scratch
COPY pilot-agent /usr/local/bin/pilot-agent
COPY testproxy /testproxy
USER 1337:1337
ENTRYPOINT ["/testproxy", "proxyv2"]
EOF

save istio pilot proxyv2
