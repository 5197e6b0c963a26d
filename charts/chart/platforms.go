package chart

// Platforms are the chart's platform presets, each with a kustomize overlay.
var Platforms = []string{"gke", "openshift", "k3s", "microk8s", "eks", "aks", "talos", "k3d", "minikube", "rancher-desktop"}
