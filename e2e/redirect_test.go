//go:build e2e

package e2e

import (
	"net"
	"path/filepath"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
)

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

// redirectSpecs checks one mesh contract: app traffic out and in goes through
// the proxy with the right original destination, annotated skips bypass it,
// the proxy's own traffic is left alone. Client and peer sit on different
// nodes where the cluster has two. skipSubnetInbound: the mesh's skip
// subnet annotation skips inbound sources only (Linkerd's skip-subnets),
// not outbound destinations (Istio's excludeOutboundIPRanges).
func redirectSpecs(mesh string, c contract, skipPortAnn, skipSubnetAnn string, skipSubnetInbound bool) {
	Describe(mesh+" contract", Ordered, Label("smoke", "redirect", mesh), func() {
		var ns string
		var pods map[string]*corev1.Pod

		BeforeAll(func(ctx SpecContext) {
			ns = newNamespace(ctx, "e2e-"+mesh)
			a, b := twoNodes(ctx)
			peer := startPods(ctx, ns, plainPod("peer", b))["peer"]
			pods = startPods(ctx, ns,
				meshedPod("client", a, c, nil),
				meshedPod("skip-port", a, c, map[string]string{skipPortAnn: "9090"}),
				meshedPod("skip-subnet", a, c, map[string]string{skipSubnetAnn: peer.Status.PodIP + "/32"}),
				plainPod("unmeshed", a),
			)
			pods["peer"] = peer
		})

		It("sends the app's outbound connections to the proxy with their original destination", func() {
			peer := pods["peer"].Status.PodIP
			r := mustConnect(ns, "client", "app", peer, 8080)
			Expect(r.Name).To(Equal("proxy"))
			Expect(r.Role).To(Equal("outbound"))
			Expect(r.Port).To(Equal(c.outbound))
			Expect(r.Orig).To(Equal(hostPort(peer, 8080)))
		})

		It("redirects every IP family the pods have (dual-stack: IPv4 and IPv6)", func() {
			for _, ip := range pods["peer"].Status.PodIPs {
				r := mustConnect(ns, "client", "app", ip.IP, 8080)
				Expect(r.Name).To(Equal("proxy"), "outbound to %s", ip.IP)
				Expect(r.Orig).To(Equal(hostPort(ip.IP, 8080)))
			}
			for _, ip := range pods["client"].Status.PodIPs {
				r := mustConnect(ns, "peer", "app", ip.IP, 8080)
				Expect(r.Name).To(Equal("proxy"), "inbound to %s", ip.IP)
				Expect(r.Role).To(Equal("inbound"))
				Expect(r.Orig).To(Equal(hostPort(ip.IP, 8080)))
			}
		})

		It("kubectl mesh-cni explain tells, from the cluster, what the node's entry does with each live pod", func() {
			plugin := filepath.Join(repoRoot(), "bin", "kubectl-mesh_cni")
			explain := func(pod string) string {
				out, err := run(plugin, "explain", "-n", ns, pod, "--kubeconfig", env.Kubeconfig)
				Expect(err).NotTo(HaveOccurred(), out)
				Expect(out).To(ContainSubstring("chain entry: node "+pods[pod].Spec.NodeName+" ("), out)
				return out
			}
			Expect(explain("client")).To(ContainSubstring("decision: redirect (mesh " + mesh + ")"))
			Expect(explain("client")).To(ContainSubstring("redirect to :" + strconv.Itoa(c.outbound)))
			Expect(explain("unmeshed")).To(ContainSubstring("decision: skip"))
		})

		It("kubectl mesh-cni explain --check confirms, through the agent on the pod's node, that the pod's netns holds the rules", func() {
			plugin := filepath.Join(repoRoot(), "bin", "kubectl-mesh_cni")
			if env.Install == "kustomize" {
				// The kustomize base is the chart's defaults: no pod-rules
				// container, and --check says which value turns it on.
				out, err := run(plugin, "explain", "-n", ns, "client", "--check", "--agent-namespace", meshNamespace, "--kubeconfig", env.Kubeconfig)
				Expect(err).To(HaveOccurred(), out)
				Expect(out).To(ContainSubstring("podRules.enabled is false"), out)
				return
			}
			check := func(pod string) string {
				out, err := run(plugin, "explain", "-n", ns, pod, "--check", "--agent-namespace", meshNamespace, "--kubeconfig", env.Kubeconfig)
				Expect(err).NotTo(HaveOccurred(), out) // exit 3 when a rule is missing or extra
				Expect(out).To(ContainSubstring("check: through agent pod "+meshNamespace+"/"), out)
				return out
			}
			out := check("client")
			Expect(out).To(MatchRegexp(`\ncheck: [1-9][0-9]* present, 0 missing, 0 extra\n`), out)
			Expect(out).To(MatchRegexp(`\npresent +\S+ +\S+ +\S+ +.*`+strconv.Itoa(c.outbound)), out)
			Expect(out).NotTo(MatchRegexp(`\n(missing|extra) `), out)
			// An unmeshed pod: nothing expected, nothing of ours found.
			Expect(check("unmeshed")).To(ContainSubstring("\ncheck: 0 present, 0 missing, 0 extra\n"))
		})

		It("sends inbound connections to the proxy with their original destination", func() {
			ip := pods["client"].Status.PodIP
			r := mustConnect(ns, "peer", "app", ip, 9090)
			Expect(r.Name).To(Equal("proxy"))
			Expect(r.Role).To(Equal("inbound"))
			Expect(r.Port).To(Equal(c.inbound))
			Expect(r.Orig).To(Equal(hostPort(ip, 9090)))
		})

		It("leaves the proxy's own connections alone", func() {
			r := mustConnect(ns, "client", c.sidecar, pods["peer"].Status.PodIP, 8080)
			Expect(r.Name).To(Equal("peer"))
			Expect(r.Role).To(Equal("app"))
		})

		It("lets an annotated skip port bypass the proxy", func() {
			peer := pods["peer"].Status.PodIP
			Expect(mustConnect(ns, "skip-port", "app", peer, 9090).Name).To(Equal("peer"))
			Expect(mustConnect(ns, "skip-port", "app", peer, 8080).Name).To(Equal("proxy"))
		})

		It("lets an annotated skip subnet bypass the proxy", func() {
			if skipSubnetInbound {
				r := mustConnect(ns, "peer", "app", pods["skip-subnet"].Status.PodIP, 8080)
				Expect(r.Name).To(Equal("skip-subnet"))
				Expect(r.Role).To(Equal("app"))
				// Outbound to the subnet still goes to the proxy.
				Expect(mustConnect(ns, "skip-subnet", "app", pods["peer"].Status.PodIP, 8080).Name).To(Equal("proxy"))
				return
			}
			r := mustConnect(ns, "skip-subnet", "app", pods["peer"].Status.PodIP, 8080)
			Expect(r.Name).To(Equal("peer"))
		})

		It("leaves an unmeshed pod untouched, both ways", func() {
			peer := pods["peer"].Status.PodIP
			Expect(mustConnect(ns, "unmeshed", "app", peer, 8080).Name).To(Equal("peer"))
			r := mustConnect(ns, "peer", "app", pods["unmeshed"].Status.PodIP, 8080)
			Expect(r.Name).To(Equal("unmeshed"))
			Expect(r.Role).To(Equal("app"))
		})
	})
}

var _ = Describe("redirect", func() {
	redirectSpecs("linkerd", linkerd, "config.linkerd.io/skip-outbound-ports", "config.linkerd.io/skip-subnets", true)
	redirectSpecs("istio", istio, "traffic.sidecar.istio.io/excludeOutboundPorts", "traffic.sidecar.istio.io/excludeOutboundIPRanges", false)
})
