#!/usr/bin/env bash
# make demo: a kind cluster with mesh-cni installed by Helm and a meshed app
# whose traffic is shown to go through its (test) proxy. Builds whatever is
# missing first (make demo runs the image targets before this script).
#   hack/demo.sh up | down
# DEMO_PRIMARY: the primary CNI mesh-cni chains after. flannel (the default):
# flannel built from source (hack/flannel), installed after the cluster
# starts as its users install it; default: kind's own (meshnet in the
# offline node image).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
CLUSTER=${DEMO_CLUSTER:-mesh-cni-demo}
KUBECONFIG_FILE=${DEMO_KUBECONFIG:-$CACHE/demo.kubeconfig}
. "$ROOT/hack/pin.sh"
NODE_IMAGE=${KIND_NODE_IMAGE:-mesh-cni/kind-node:$(pin K8S_VERSION)}
PRIMARY=${DEMO_PRIMARY:-flannel}
NS=demo

log() { printf '\n== %s\n' "$*" >&2; }

tools() {
  KIND=$(bash "$ROOT/hack/kind-cli.sh" | tail -n1)
  HELM=$(bash "$ROOT/hack/chart-tools.sh" helm | tail -n1)/helm
  KUBECTL=$(bash "$ROOT/hack/build-k8s.sh" kubectl | tail -n1)/kubectl
}

k() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

tag_of() { # the first RepoTag in a docker save tarball
  tar -xOf "$1" manifest.json | jq -r '.[0].RepoTags[0]'
}

up() {
  : "${MESH_TAR:?}" "${PROXY_TAR:?}"
  tools
  local mesh proxy
  mesh=$(tag_of "$MESH_TAR")
  proxy=$(tag_of "$PROXY_TAR")
  case "$PRIMARY" in
    default | flannel) ;;
    *) echo "DEMO_PRIMARY must be default or flannel, got $PRIMARY" >&2; exit 2 ;;
  esac
  if ! "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    log "creating kind cluster $CLUSTER (1 control plane, 1 worker; primary CNI: $PRIMARY)"
    if [ "$PRIMARY" = flannel ]; then
      local flannel_tar
      flannel_tar=$(bash "$ROOT/hack/build-flannel.sh" | tail -n1)
      # No --wait: nodes get Ready only once flannel writes its conflist.
      "$KIND" create cluster --name "$CLUSTER" --image "$NODE_IMAGE" --kubeconfig "$KUBECONFIG_FILE" --config - <<'YAML'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true
  podSubnet: 10.244.0.0/16
nodes:
- role: control-plane
- role: worker
YAML
      log "installing flannel (hack/flannel/kube-flannel.yml)"
      "$KIND" load image-archive --name "$CLUSTER" "$flannel_tar"
      k apply -f "$ROOT/hack/flannel/kube-flannel.yml"
      k -n kube-flannel rollout status ds/kube-flannel-ds --timeout 4m
      k wait --for=condition=Ready node --all --timeout 3m
    else
      "$KIND" create cluster --name "$CLUSTER" --image "$NODE_IMAGE" --kubeconfig "$KUBECONFIG_FILE" \
        --wait 3m --config - <<'YAML'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
- role: control-plane
- role: worker
YAML
    fi
  else
    "$KIND" export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG_FILE" >/dev/null
  fi
  log "loading images $mesh and $proxy"
  "$KIND" load image-archive --name "$CLUSTER" "$MESH_TAR"
  "$KIND" load image-archive --name "$CLUSTER" "$PROXY_TAR"

  log "helm install mesh-cni"
  "$HELM" upgrade --install mesh-cni "$ROOT/charts/mesh-cni" --kubeconfig "$KUBECONFIG_FILE" \
    --namespace mesh-cni --create-namespace \
    --set image.repository="${mesh%:*}" --set image.tag="${mesh##*:}" --wait --timeout 5m
  k -n mesh-cni rollout status ds/mesh-cni --timeout 3m

  log "deploying the demo app in namespace $NS (Pod Security: restricted, no NET_ADMIN)"
  sed "s|TESTPROXY_IMAGE|$proxy|g" "$ROOT/hack/demo-app.yaml" | k apply -f -
  k -n "$NS" wait --for=condition=Ready pod/web pod/client --timeout 3m

  local web client out
  web=$(k -n "$NS" get pod web -o jsonpath='{.status.podIP}')
  client=$(k -n "$NS" get pod client -o jsonpath='{.status.podIP}')
  log "the meshed client's app container dials web ($web:8080)"
  out=$(k -n "$NS" exec client -c app -- /testproxy connect "$web:8080")
  echo "answer: $out"
  log "web dials the meshed client's app port ($client:8080)"
  k -n "$NS" exec web -c app -- /testproxy connect "$client:8080"
  log "what the client's proxy (linkerd-proxy container, UID 2102) recorded"
  k -n "$NS" logs client -c linkerd-proxy
  cat <<EOT

The answers came from the proxy ("name":"proxy"), not from web or the app:
outbound connections went to the proxy's outbound port 4140 and inbound ones to
4143, each with the original destination ("orig") the app dialled, set up by
mesh-cni in the pod's network namespace without any init container.

  kubectl --kubeconfig $KUBECONFIG_FILE -n $NS get pods
  make demo-down      # deletes the cluster
EOT
}

down() {
  KIND=$(bash "$ROOT/hack/kind-cli.sh" | tail -n1)
  # A node stuck on a frozen cgroup (internal/testsupport/kindnode) is thawed, then deleted.
  "$KIND" delete cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG_FILE" || {
    (cd "$ROOT" && go run ./hack/kind-thaw "$CLUSTER")
    "$KIND" delete cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG_FILE"
  }
  rm -f "$KUBECONFIG_FILE"
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
