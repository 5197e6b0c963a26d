//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// Mesh contracts the suite plays: the proxy container's name, UID and ports
// are those mesh-cni's profiles expect (internal/mesh).
type contract struct {
	sidecar     string
	uid         int64
	inbound     int
	outbound    int
	annotations map[string]string
}

var (
	linkerd = contract{
		sidecar: "linkerd-proxy", uid: 2102, inbound: 4143, outbound: 4140,
		annotations: map[string]string{
			"linkerd.io/inject":        "enabled",
			"linkerd.io/proxy-version": "e2e",
		},
	}
	istio = contract{
		sidecar: "istio-proxy", uid: 1337, inbound: 15006, outbound: 15001,
		annotations: map[string]string{
			"sidecar.istio.io/status": `{"initContainers":null,"containers":["istio-proxy"],"volumes":["istio-envoy"],"imagePullSecrets":null,"revision":"default"}`,
		},
	}
	// Kuma 2.x's per-field annotations (internal/mesh/README.md); the chart
	// turns the profile on in the e2e install.
	kuma = contract{
		sidecar: "kuma-sidecar", uid: 5678, inbound: 15006, outbound: 15001,
		annotations: map[string]string{
			"kuma.io/sidecar-injected":                   "true",
			"kuma.io/sidecar-uid":                        "5678",
			"kuma.io/transparent-proxying-inbound-port":  "15006",
			"kuma.io/transparent-proxying-outbound-port": "15001",
		},
	}
	// consul-k8s's CNI-mode annotations with the injector's redirect
	// configuration (DNS off).
	consul = contract{
		sidecar: "consul-dataplane", uid: 5995, inbound: 20000, outbound: 15001,
		annotations: map[string]string{
			"consul.hashicorp.com/connect-inject-status":    "injected",
			"consul.hashicorp.com/transparent-proxy-status": "enabled",
			"consul.hashicorp.com/redirect-traffic-config":  `{"ConsulDNSIP":"","ConsulDNSPort":0,"ProxyUserID":"5995","ProxyInboundPort":20000,"ProxyOutboundPort":15001,"ExcludeInboundPorts":null,"ExcludeOutboundPorts":null,"ExcludeOutboundCIDRs":null,"ExcludeUIDs":["5996"],"NetNS":"","IptablesProvider":null}`,
		},
	}
)

// record is one connection as the test proxy saw it (testproxy.Record).
type record struct {
	Name string `json:"name"`
	Role string `json:"role"`
	Port int    `json:"port"`
	Orig string `json:"orig"`
	UID  int    `json:"uid"`
}

const appUID = 1000

// Ports every app container serves (the proxy records them as original destinations).
var appPorts = []int{8080, 9090}

// newNamespace makes a namespace that enforces the restricted Pod Security
// Standard: meshed pods need no NET_ADMIN, so they run there.
func newNamespace(ctx context.Context, prefix string) string {
	return newNamespaceWith(ctx, prefix, nil, nil)
}

// newNamespaceWith is newNamespace with extra labels and annotations.
func newNamespaceWith(ctx context.Context, prefix string, labels, annotations map[string]string) string {
	name := fmt.Sprintf("%s-%d", prefix, rand.Intn(1_000_000))
	createNamespace(ctx, name, labels, annotations)
	return name
}

// createNamespace makes a namespace of a fixed name that enforces the
// restricted Pod Security Standard, with extra labels and annotations, and
// deletes it after the spec (or the Ordered container) that made it.
func createNamespace(ctx context.Context, name string, labels, annotations map[string]string) {
	l := map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}
	for k, v := range labels {
		l[k] = v
	}
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: l, Annotations: annotations,
	}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		_ = client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	})
}

func restricted(uid int64) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser:                ptr.To(uid),
		RunAsGroup:               ptr.To(uid),
		RunAsNonRoot:             ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func proxyContainer(name string, args ...string) corev1.Container {
	return corev1.Container{
		Name:            name,
		Image:           env.ProxyImage,
		ImagePullPolicy: corev1.PullNever,
		Command:         append([]string{"/testproxy"}, args...),
	}
}

func portList(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// plainPod serves the app ports as "name"; no mesh contract.
func plainPod(name, node string) *corev1.Pod {
	app := proxyContainer("app", "serve", "-name", name, "-ports", portList(appPorts))
	app.SecurityContext = restricted(appUID)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{app},
		},
	}
}

// meshedPod is a plainPod plus the mesh's sidecar (the test proxy, as the
// proxy UID) and the annotations its injector writes.
func meshedPod(name, node string, c contract, extra map[string]string) *corev1.Pod {
	p := plainPod(name, node)
	p.Annotations = map[string]string{}
	for k, v := range c.annotations {
		p.Annotations[k] = v
	}
	for k, v := range extra {
		p.Annotations[k] = v
	}
	proxy := proxyContainer(c.sidecar, "serve", "-name", "proxy",
		"-outbound", strconv.Itoa(c.outbound), "-inbound", strconv.Itoa(c.inbound))
	proxy.SecurityContext = restricted(c.uid)
	p.Spec.Containers = append(p.Spec.Containers, proxy)
	return p
}

// startPods creates the pods and waits until all run; returns them with IPs.
func startPods(ctx context.Context, ns string, pods ...*corev1.Pod) map[string]*corev1.Pod {
	for _, p := range pods {
		_, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred(), "creating pod %s", p.Name)
	}
	out := map[string]*corev1.Pod{}
	for _, p := range pods {
		out[p.Name] = waitRunning(ctx, ns, p.Name)
	}
	return out
}

func waitRunning(ctx context.Context, ns, name string) *corev1.Pod {
	var pod *corev1.Pod
	Eventually(ctx, func(g Gomega) {
		var err error
		pod, err = client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		expectRunning(g, pod)
	}).WithTimeout(testenv.Scale(2 * time.Minute)).WithPolling(time.Second).Should(Succeed())
	return pod
}

// expectRunning: the pod runs, has its address and every container is ready.
func expectRunning(g Gomega, pod *corev1.Pod) {
	g.Expect(runningProblem(pod)).To(BeEmpty())
}

// runningProblem says why the pod does not run with its address and every
// container ready, "" when it does.
func runningProblem(pod *corev1.Pod) string {
	switch {
	case pod.Status.Phase != corev1.PodRunning:
		return fmt.Sprintf("pod %s is %s: %s", pod.Name, pod.Status.Phase, podProblem(pod))
	case pod.Status.PodIP == "":
		return fmt.Sprintf("pod %s has no address", pod.Name)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if !cs.Ready {
			return fmt.Sprintf("container %s of %s is not ready", cs.Name, pod.Name)
		}
	}
	return ""
}

// waitAllRunning waits until every named pod runs with its containers
// ready, as long as one more starts every bound: pods queued together
// behind a primary's restart are served at the primary's pace (and the
// kubelet's back-off between sandbox attempts), which a slower machine
// stretches; a pod that does not start for bound while no other does
// fails the wait. It says how long the wait took.
func waitAllRunning(ctx context.Context, ns string, names []string, bound time.Duration) {
	start := time.Now()
	err := testenv.WaitProgress(ctx, bound, 2*time.Second, func() []string {
		var left []string
		for _, name := range names {
			pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				left = append(left, err.Error())
			} else if p := runningProblem(pod); p != "" {
				left = append(left, p)
			}
		}
		return left
	})
	Expect(err).NotTo(HaveOccurred(), "pods not running")
	GinkgoWriter.Printf("%d pods running after %s (bound without one more starting: %s)\n", len(names), time.Since(start).Round(time.Second), bound)
}

func podProblem(p *corev1.Pod) string {
	var s []string
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s = append(s, c.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			s = append(s, cs.Name+": "+w.Reason+" "+w.Message)
		}
	}
	return strings.Join(s, "; ")
}

// connect dials addr from a container of a pod with the test program and
// returns the record of whoever answered: the proxy when redirected, the
// destination's app otherwise.
func connect(ns, pod, container, ip string, port int) (record, error) {
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	out, err := kubectl("exec", "-n", ns, pod, "-c", container, "--", "/testproxy", "connect", addr)
	if err != nil {
		return record{}, err
	}
	var r record
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		return record{}, fmt.Errorf("answer from %s: %q: %w", addr, out, err)
	}
	return r, nil
}

func mustConnect(ns, pod, container, ip string, port int) record {
	var r record
	Eventually(func() error {
		var err error
		r, err = connect(ns, pod, container, ip, port)
		return err
	}).WithTimeout(testenv.Scale(30 * time.Second)).WithPolling(time.Second).Should(Succeed())
	return r
}

// schedulableNodes returns node names that take ordinary pods, in a stable
// order. It first waits until every node is Ready and carries none of the
// taints a node has only for a while (not-ready, unreachable, the startup
// taint): right after an install or an agent restart the runtime's network
// STATUS, the kubelet and the node controller take some seconds to lift them,
// and a spec must not read a passing state as "no node takes pods".
func schedulableNodes(ctx context.Context) []string {
	var names []string
	Eventually(ctx, func(g Gomega) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		names = nil
		for _, n := range nodes.Items {
			g.Expect(nodeReady(&n)).To(BeTrue(), "node %s is not Ready", n.Name)
			ok := true
			for _, t := range n.Spec.Taints {
				g.Expect(transientTaint(t.Key)).To(BeFalse(), "node %s has taint %s", n.Name, t.Key)
				if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
					ok = false
				}
			}
			if ok {
				names = append(names, n.Name)
			}
		}
		g.Expect(names).NotTo(BeEmpty(), "no node takes ordinary pods")
	}).WithTimeout(testenv.Scale(2 * time.Minute)).WithPolling(time.Second).Should(Succeed())
	return names
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// transientTaint: the node lifecycle controller's condition taints and the
// startup taint come and go; the control plane's NoSchedule taint stays.
func transientTaint(key string) bool {
	switch key {
	case corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeNetworkUnavailable, startupTaint:
		return true
	}
	return false
}

// twoNodes gives two different nodes where the cluster has them, so traffic crosses nodes.
func twoNodes(ctx context.Context) (string, string) {
	n := schedulableNodes(ctx)
	if len(n) == 1 {
		return n[0], n[0]
	}
	return n[0], n[1]
}
