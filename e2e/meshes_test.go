//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
)

// One node serves the four sidecar meshes at once: a pod of each, started
// together on one node in a namespace under Pod Security restricted, is
// redirected to its own proxy's ports, and no proxy's traffic loops.
var _ = Describe("four meshes on one node", Ordered, Label("meshes"), func() {
	contracts := map[string]contract{"linkerd": linkerd, "istio": istio, "kuma": kuma, "consul": consul}
	var ns string
	var pods map[string]*corev1.Pod

	BeforeAll(func(ctx SpecContext) {
		if install := env.Install; install != "helm" {
			Skip("the kuma and consul profiles are turned on by the helm install of this suite, not by " + install)
		}
		ns = newNamespace(ctx, "e2e-meshes")
		a, b := twoNodes(ctx)
		var list []*corev1.Pod
		for name, c := range contracts {
			list = append(list, meshedPod(name, a, c, nil))
		}
		pods = startPods(ctx, ns, append(list, plainPod("peer", b))...)
	})

	for name, c := range contracts {
		It(name+": app traffic out and in reaches its proxy, the proxy's own does not loop", func() {
			peer, self := pods["peer"].Status.PodIP, pods[name].Status.PodIP
			r := mustConnect(ns, name, "app", peer, 8080)
			Expect(r.Name).To(Equal("proxy"))
			Expect(r.Role).To(Equal("outbound"))
			Expect(r.Port).To(Equal(c.outbound))
			Expect(r.Orig).To(Equal(hostPort(peer, 8080)))
			r = mustConnect(ns, "peer", "app", self, 9090)
			Expect(r.Name).To(Equal("proxy"))
			Expect(r.Role).To(Equal("inbound"))
			Expect(r.Port).To(Equal(c.inbound))
			Expect(r.Orig).To(Equal(hostPort(self, 9090)))
			r = mustConnect(ns, name, c.sidecar, peer, 8080)
			Expect(r.Name).To(Equal("peer"))
		})
	}
})
