//go:build e2e

package e2e

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kind/pkg/cluster/nodes"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// flannel's own check, on a cluster whose primary is flannel: pods on two
// nodes reach each other through flannel's VXLAN device, first with
// mesh-cni chained after flannel, then with mesh-cni uninstalled.
var _ = Describe("flannel as the primary", Serial, Ordered, Label("flannel"), func() {
	var a, b string

	BeforeAll(func(ctx SpecContext) {
		if env.Primary != primaryFlannel {
			Skip("the primary is " + env.Primary + "; E2E_PRIMARY=flannel runs these")
		}
		a, b = twoNodes(ctx)
		Expect(a).NotTo(Equal(b), "flannel's check needs two nodes that take pods")
	})

	It("carries pods on two nodes over VXLAN with mesh-cni chained", func(ctx SpecContext) {
		for _, n := range []string{a, b} {
			path, conf := primaryConf(nodeByName(n))
			Expect(path).To(Equal(flannelConflist))
			Expect(pluginTypes(conf)).To(Equal([]string{"flannel", "portmap", "mesh-cni"}), "%s on %s", path, n)
		}
		ns := newNamespace(ctx, "e2e-flannel-chained")
		pods := startPods(ctx, ns, plainPod("x", a), plainPod("y", b), meshedPod("meshed", a, linkerd, nil))
		overVXLAN(ctx, ns, a, b, "x", pods["x"].Status.PodIP, "y", pods["y"].Status.PodIP)

		By("a meshed pod's inbound connection from the other node reaches its proxy")
		ip := pods["meshed"].Status.PodIP
		r := mustConnect(ns, "y", "app", ip, 8080)
		Expect(r.Name).To(Equal("proxy"))
		Expect(r.Role).To(Equal("inbound"))
		Expect(r.Orig).To(Equal(hostPort(ip, 8080)))
	})

	It("carries them without mesh-cni, from flannel's own conflist", func(ctx SpecContext) {
		By("uninstalling mesh-cni (" + env.Install + ")")
		DeferCleanup(func(ctx SpecContext) { reinstall(ctx) })
		uninstall(ctx)
		wrote, _ := primaryWrote(ctx)
		for _, n := range []string{a, b} {
			node := nodeByName(n)
			Eventually(ctx, func() string {
				_, c := primaryConf(node)
				return c
			}).WithTimeout(testenv.Scale(2*time.Minute)).WithPolling(time.Second).Should(Equal(wrote),
				"%s on %s: byte for byte the ConfigMap's cni-conf.json", flannelConflist, n)
		}
		ns := newNamespace(ctx, "e2e-flannel-alone")
		pods := startPods(ctx, ns, plainPod("x", a), plainPod("y", b))
		overVXLAN(ctx, ns, a, b, "x", pods["x"].Status.PodIP, "y", pods["y"].Status.PodIP)
	})
})

// overVXLAN checks that pod x on node a and pod y on node b have addresses
// from their nodes' flannel subnets, that a routes y's address through
// flannel's VXLAN device, and that x and y reach each other both ways with
// packets leaving a through that device.
func overVXLAN(ctx context.Context, ns, a, b, x, xIP, y, yIP string) {
	for _, p := range []struct{ node, ip string }{{a, xIP}, {b, yIP}} {
		n, err := client.CoreV1().Nodes().Get(ctx, p.node, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, cidr, err := net.ParseCIDR(n.Spec.PodCIDR)
		Expect(err).NotTo(HaveOccurred(), "podCIDR of %s", p.node)
		Expect(cidr.Contains(net.ParseIP(p.ip))).To(BeTrue(), "pod IP %s on %s, outside its subnet %s", p.ip, p.node, cidr)
	}
	node := nodeByName(a)
	out, err := nodeExec(node, "ip", "-d", "link", "show", "flannel.1")
	Expect(err).NotTo(HaveOccurred(), out)
	Expect(out).To(ContainSubstring("vxlan id 1 "), "flannel.1 on %s", a)
	out, err = nodeExec(node, "ip", "route", "get", yIP)
	Expect(err).NotTo(HaveOccurred(), out)
	Expect(out).To(ContainSubstring("dev flannel.1 "), "the route from %s to %s", a, yIP)
	GinkgoWriter.Printf("on %s: %s", a, out)

	before := txPackets(node)
	Expect(mustConnect(ns, x, "app", yIP, 8080).Name).To(Equal(y))
	r := mustConnect(ns, y, "app", xIP, 8080)
	Expect(r.Name).To(Equal(x))
	Expect(r.Role).To(Equal("app"))
	after := txPackets(node)
	GinkgoWriter.Printf("flannel.1 on %s sent %d packets meanwhile\n", a, after-before)
	Expect(after).To(BeNumerically(">", before), "packets sent through flannel.1 on %s", a)
}

func txPackets(n nodes.Node) uint64 {
	out, err := nodeExec(n, "cat", "/sys/class/net/flannel.1/statistics/tx_packets")
	Expect(err).NotTo(HaveOccurred(), out)
	v, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	Expect(err).NotTo(HaveOccurred(), out)
	return v
}
