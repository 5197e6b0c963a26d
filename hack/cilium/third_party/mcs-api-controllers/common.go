// Package controllers stands in for sigs.k8s.io/mcs-api/controllers, which
// the Go module proxy does not serve. Cilium v1.20.2 uses only the name of
// the annotation below; its value is the one kubernetes-sigs/mcs-api v0.5.2
// declares in controllers/common.go.
package controllers

// DerivedServiceAnnotation is set on a ServiceImport to the name of the
// Service derived from it.
const DerivedServiceAnnotation = "multicluster.kubernetes.io/derived-service"
