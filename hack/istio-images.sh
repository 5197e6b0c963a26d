#!/usr/bin/env bash
# Builds the images the e2e suite installs Istio from (label istio-real) and
# saves them into one tarball for kind:
#
#   mesh-cni.local/istio/pilot:<key>    FROM scratch, Istio's pilot-discovery
#                                       (istiod), as in Istio's pilot image
#   mesh-cni.local/istio/proxyv2:<key>  FROM scratch, Istio's pilot-agent at
#                                       /usr/local/bin/pilot-agent (as in
#                                       Istio's proxyv2 image) and the test
#                                       proxy as the entrypoint
#
# Istio's commands come from hack/build-istio.sh (the version pinned in
# hack/istio/go.mod); the test proxy from testproxy/. Envoy is not built
# here, so the proxyv2 stand-in runs the test proxy where Istio runs
# pilot-agent and Envoy (`proxy sidecar`) and Istio's pilot-agent for every
# other command, such as istio-validation (testproxy/proxyv2.go). Both are
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

istio=$(bash "$here/build-istio.sh" pilot-discovery pilot-agent | tail -n1)
mkdir -p "$CACHE/images"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/pilot" "$ctx/proxyv2"
cp "$istio/pilot-discovery" "$ctx/pilot/"
cp "$istio/pilot-agent" "$ctx/proxyv2/"
(cd "$root" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false "$GO" build -trimpath -ldflags '-s -w' -o "$ctx/proxyv2/testproxy" ./testproxy)

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

key=$(cd "$ctx" && sha256sum pilot/* proxyv2/* | sha256sum | cut -c1-16)
tar="$CACHE/images/istio-$key.tar"

exec 9>"$CACHE/images/.istio-images.lock"
flock 9
if [ -s "$tar" ]; then
  echo "$tar"
  exit 0
fi

bash "$here/docker.sh"
start=$SECONDS
for img in pilot proxyv2; do
  DOCKER_BUILDKIT=0 docker build -q -t "$HUB/$img:$key" "$ctx/$img" >/dev/null
done
docker save -o "$tar.tmp" "$HUB/pilot:$key" "$HUB/proxyv2:$key"
mv "$tar.tmp" "$tar"
log "built $HUB/{pilot,proxyv2}:$key in $((SECONDS - start))s"
echo "$tar"
