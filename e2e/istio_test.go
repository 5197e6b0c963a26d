//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// Istio's real control plane (istiod and its sidecar injector, built from
// the version pinned in hack/istio/go.mod) with mesh-cni as the CNI. The
// images come from hack/istio-images.sh: istiod is Istio's own
// pilot-discovery; the proxyv2 image holds Istio's pilot-agent, which runs
// istio-validation, and our test proxy in place of Envoy for the istio-proxy
// container (internal/testsupport/testproxy/proxyv2.go). So the injection, the injected pod spec,
// Istio's own check that the redirect works and the repair of a pod that
// failed it are all real; only the proxy that answers is ours.

const (
	istioNamespace = "istio-system"
	// istioUnredirected is excluded from mesh-cni for the repair spec, so
	// its pods start without redirection although Istio injects them.
	istioUnredirected = "e2e-istio-unredirected"
	// OpenShift's restricted SCC range for the namespace of the OpenShift
	// shape; istiod with PLATFORM=openshift gives the proxy the range's
	// last UID and the app gets its first.
	openshiftRange    = "1000650000/10000"
	openshiftAppUID   = 1000650000
	openshiftProxyUID = 1000659999
	// The exit code istio-validation fails with (Istio's
	// tools/istio-iptables/pkg/constants ValidationErrorCode).
	istioValidationFailed = 126
)

// istioShape is one kind of application pod given to Istio's injector.
type istioShape struct {
	name string
	// openshift: the pod's namespace carries OpenShift's UID range.
	openshift bool
	mutate    func(*corev1.Pod)
	// What the injected pod must look like.
	native   bool
	proxyUID int64
	// userNS: the pod runs in a user namespace (hostUsers: false), which
	// the node's runtime must support.
	userNS bool
}

var istioShapes = []istioShape{
	// On Kubernetes 1.33 and later Istio's default (ENABLE_NATIVE_SIDECARS
	// unset, "auto") makes istio-proxy a native sidecar: the kind nodes are
	// 1.34, so the default pod is a native-sidecar pod.
	{name: "default", native: true, proxyUID: 1337},
	{name: "classic-sidecar", native: false, proxyUID: 1337, mutate: func(p *corev1.Pod) {
		p.Annotations["sidecar.istio.io/nativeSidecar"] = "false"
	}},
	// The pod's identity is set for the pod, the app inherits it; the
	// injector keeps the proxy's own. (A pod-level runAsGroup without a
	// pod-level runAsUser does not start at all with containerd: "user group
	// is specified without user" for the sandbox.)
	{name: "pod-run-as-group", native: true, proxyUID: 1337, mutate: func(p *corev1.Pod) {
		p.Spec.SecurityContext.RunAsUser = ptr.To[int64](appUID)
		p.Spec.SecurityContext.RunAsGroup = ptr.To[int64](3000)
		p.Spec.Containers[0].SecurityContext.RunAsUser = nil
		p.Spec.Containers[0].SecurityContext.RunAsGroup = nil
	}},
	{name: "openshift-uid", openshift: true, native: true, proxyUID: openshiftProxyUID, mutate: func(p *corev1.Pod) {
		p.Spec.Containers[0].SecurityContext.RunAsUser = ptr.To[int64](openshiftAppUID)
		p.Spec.Containers[0].SecurityContext.RunAsGroup = nil
		p.Spec.SecurityContext.FSGroup = ptr.To[int64](openshiftAppUID)
	}},
	{name: "host-users-false", native: true, proxyUID: 1337, userNS: true, mutate: func(p *corev1.Pod) {
		p.Spec.HostUsers = ptr.To(false)
	}},
}

// skipReason says why a shape cannot run on this cluster ("" when it can).
func (s istioShape) skipReason(ctx context.Context, node string) string {
	if !s.userNS {
		return ""
	}
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	for _, h := range n.Status.RuntimeHandlers {
		if h.Name == "" && h.Features != nil && ptr.Deref(h.Features.UserNamespaces, false) {
			return ""
		}
	}
	return "the runtime of node " + node + " does not support user namespaces (status.runtimeHandlers; runc 1.2 or later is needed)"
}

var _ = Describe("Istio control plane", Ordered, Label("istio-real"), func() {
	var ns, nsOpenShift string
	var peer *corev1.Pod
	skip := map[string]string{}

	BeforeAll(func(ctx SpecContext) {
		installIstio(ctx)
		peerNS := newNamespace(ctx, "e2e-istio-peer")
		ns = newNamespaceWith(ctx, "e2e-istio", map[string]string{"istio-injection": "enabled"}, nil)
		nsOpenShift = newNamespaceWith(ctx, "e2e-istio-openshift", map[string]string{"istio-injection": "enabled"}, map[string]string{
			"openshift.io/sa.scc.uid-range":           openshiftRange,
			"openshift.io/sa.scc.supplemental-groups": openshiftRange,
		})
		a, b := twoNodes(ctx)
		// Every shape's pod starts at once; each spec waits for its own.
		for _, s := range istioShapes {
			if skip[s.name] = s.skipReason(ctx, a); skip[s.name] == "" {
				createIstioPod(ctx, s.namespace(ns, nsOpenShift), s, a)
			}
		}
		peer = startPods(ctx, peerNS, plainPod("peer", b))["peer"]
	})

	for _, s := range istioShapes {
		It(s.name+": injected by istiod, istio-validation passes, app traffic reaches the proxy, the proxy's own does not loop", func(ctx SpecContext) {
			if skip[s.name] != "" {
				Skip(skip[s.name])
			}
			podNS := s.namespace(ns, nsOpenShift)
			pod := waitRunning(ctx, podNS, s.name)

			By("the injection is Istio's, in CNI mode")
			Expect(pod.Annotations).To(HaveKey("sidecar.istio.io/status"))
			Expect(pod.Spec.InitContainers).NotTo(BeEmpty())
			Expect(containerNames(pod.Spec.InitContainers)).NotTo(ContainElement("istio-init"))
			Expect(containerNames(pod.Spec.InitContainers)[0]).To(Equal("istio-validation"))
			proxy := findContainer(pod, "istio-proxy")
			Expect(proxy).NotTo(BeNil())
			if s.native {
				Expect(containerNames(pod.Spec.InitContainers)).To(ContainElement("istio-proxy"), "native sidecar")
				Expect(proxy.RestartPolicy).To(HaveValue(Equal(corev1.ContainerRestartPolicyAlways)))
			} else {
				Expect(containerNames(pod.Spec.Containers)).To(ContainElement("istio-proxy"), "classic sidecar")
			}
			Expect(proxy.SecurityContext.RunAsUser).To(HaveValue(Equal(s.proxyUID)))
			Expect(proxy.Image).To(HavePrefix(istioHub + "/proxyv2:"))

			By("istio-validation (Istio's pilot-agent) exited 0")
			validation := initStatus(pod, "istio-validation")
			Expect(validation).NotTo(BeNil())
			Expect(validation.State.Terminated).NotTo(BeNil())
			Expect(validation.State.Terminated.ExitCode).To(BeZero())
			Expect(validation.RestartCount).To(BeZero())

			By("the app's outbound connection reaches the proxy with its original destination")
			r := mustConnect(podNS, s.name, "app", peer.Status.PodIP, 8080)
			Expect(r.Name).To(Equal("proxy"))
			Expect(r.Role).To(Equal("outbound"))
			Expect(r.Port).To(Equal(15001))
			Expect(r.Orig).To(Equal(hostPort(peer.Status.PodIP, 8080)))
			Expect(r.UID).To(BeEquivalentTo(s.proxyUID), "the proxy runs as the UID Istio gave it")

			By("an inbound connection reaches the proxy with its original destination")
			r = mustConnect(peer.Namespace, "peer", "app", pod.Status.PodIP, 9090)
			Expect(r.Name).To(Equal("proxy"))
			Expect(r.Role).To(Equal("inbound"))
			Expect(r.Port).To(Equal(15006))
			Expect(r.Orig).To(Equal(hostPort(pod.Status.PodIP, 9090)))

			By("the proxy's own connection goes straight to the peer")
			r = mustConnect(podNS, s.name, "istio-proxy", peer.Status.PodIP, 8080)
			Expect(r.Name).To(Equal("peer"))
			Expect(r.Role).To(Equal("app"))
		})
	}

	It("repairs a pod whose istio-validation found no redirect (exit 126)", func(ctx SpecContext) {
		if env.Install != "helm" {
			Skip("the repair spec excludes a namespace with Helm; this run installed with " + env.Install)
		}
		By("excluding " + istioUnredirected + " from mesh-cni: its pods start unredirected")
		image := currentAgentImage(ctx)
		helmInstall(image, "--set", "excludeNamespaces={kube-system,"+istioUnredirected+"}")
		DeferCleanup(func(ctx SpecContext) {
			helmInstall(image)
			waitDaemonSetReady(ctx, client, 3*time.Minute)
		})
		waitDaemonSetReady(ctx, client, 3*time.Minute)
		a, _ := twoNodes(ctx)
		Eventually(ctx, func() string {
			_, conf := primaryConf(nodeByName(a))
			return conf
		}).WithTimeout(testenv.Scale(time.Minute)).WithPolling(time.Second).Should(ContainSubstring(istioUnredirected),
			"the chain entry on %s excludes the namespace", a)
		createNamespace(ctx, istioUnredirected, map[string]string{"istio-injection": "enabled"}, nil)

		s := istioShape{name: "unredirected", native: true, proxyUID: 1337}
		created := createIstioPod(ctx, istioUnredirected, s, a)
		Expect(containerNames(created.Spec.InitContainers)).To(ContainElement("istio-validation"))

		By("istio-validation exits 126, and mesh-cni's repair deletes the pod")
		w, err := client.CoreV1().Pods(istioUnredirected).Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", created.Name).String(),
			ResourceVersion: created.ResourceVersion,
		})
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		var exit126, gone bool
		deadline := time.After(testenv.Scale(3 * time.Minute))
		for !gone {
			select {
			case ev, ok := <-w.ResultChan():
				Expect(ok).To(BeTrue(), "the watch ended early")
				p, isPod := ev.Object.(*corev1.Pod)
				if !isPod || p.UID != created.UID {
					continue
				}
				if st := initStatus(p, "istio-validation"); st != nil {
					for _, t := range []*corev1.ContainerStateTerminated{st.State.Terminated, st.LastTerminationState.Terminated} {
						if t != nil && t.ExitCode == istioValidationFailed {
							exit126 = true
						}
						Expect(t == nil || t.ExitCode != 0).To(BeTrue(), "istio-validation passed in a namespace mesh-cni excludes")
					}
				}
				gone = ev.Type == watch.Deleted || p.DeletionTimestamp != nil
			case <-deadline:
				Fail(fmt.Sprintf("pod %s/%s was not repaired (istio-validation exited %d: %v)", istioUnredirected, created.Name, istioValidationFailed, exit126))
			}
		}
		Expect(exit126).To(BeTrue(), "the pod was deleted before istio-validation was seen failing")
		Eventually(ctx, func(g Gomega) {
			evs, err := client.CoreV1().Events(istioUnredirected).List(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.uid=" + string(created.UID),
			})
			g.Expect(err).NotTo(HaveOccurred())
			var reasons []string
			for _, e := range evs.Items {
				if e.Source.Component == "mesh-cni-repair" || e.ReportingController == "mesh-cni-repair" {
					reasons = append(reasons, e.Reason+": "+e.Message)
				}
			}
			g.Expect(reasons).To(ContainElement(And(
				HavePrefix("DeletedUnmeshedPod: "),
				ContainSubstring("istio-validation exited 126"))))
		}).WithTimeout(testenv.Scale(time.Minute)).WithPolling(time.Second).Should(Succeed())
	})
})

func (s istioShape) namespace(ns, openshift string) string {
	if s.openshift {
		return openshift
	}
	return ns
}

// istioPod is the application pod of a shape: the app only, the injector
// adds the rest.
func istioPod(s istioShape, node string) *corev1.Pod {
	app := proxyContainer("app", "serve", "-name", s.name, "-ports", portList(appPorts))
	app.SecurityContext = restricted(appUID)
	// The seccomp profile is set for the pod: the restricted namespace
	// checks the injector's containers too, and they set none.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Labels: map[string]string{"app": s.name}, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{app},
		},
	}
	if node != "" {
		pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	}
	if s.mutate != nil {
		s.mutate(pod)
	}
	return pod
}

// createIstioPod creates the pod of a shape on a node and returns it as
// admitted.
func createIstioPod(ctx context.Context, ns string, s istioShape, node string) *corev1.Pod {
	pod := istioPod(s, node)
	var out *corev1.Pod
	// The injector's webhook is up (installIstio waited), but it fails
	// closed: retry a refused create for a while.
	Eventually(ctx, func() error {
		var err error
		out, err = client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	}).WithTimeout(testenv.Scale(time.Minute)).WithPolling(2*time.Second).Should(Succeed(), "creating pod %s/%s", ns, s.name)
	return out
}

func containerNames(cs []corev1.Container) []string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Name)
	}
	return n
}

func findContainer(p *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

func initStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.InitContainerStatuses {
		if p.Status.InitContainerStatuses[i].Name == name {
			return &p.Status.InitContainerStatuses[i]
		}
	}
	return nil
}

// istioHub is where hack/istio-images.sh tags its images.
const istioHub = "mesh-cni.local/istio"

// installIstio loads the Istio images and installs Istio's control plane
// the way docs/istio.md does: rendered by istioctl offline from its embedded
// charts with components.cni.enabled=true (in the pinned version the only
// way to get values.pilot.cni.enabled, CNI mode), and applied without the
// objects of istioctl's Cni component (Istio's own CNI node agent). The
// --set values beyond the docs' fit the test: local images, small requests,
// the OpenShift platform. Then it waits until the injector injects.
func installIstio(ctx context.Context) {
	tar := os.Getenv("E2E_ISTIO_IMAGES")
	Expect(tar).NotTo(BeEmpty(), "E2E_ISTIO_IMAGES: the tarball of hack/istio-images.sh (make test-e2e-istio)")
	var tag string
	for _, t := range archiveTags(tar) {
		if repo, tg := splitImage(t); repo == istioHub+"/pilot" {
			tag = tg
		}
	}
	Expect(tag).NotTo(BeEmpty(), "no %s/pilot image in %s", istioHub, tar)
	By("loading Istio's images (" + filepath.Base(tar) + ") into every node")
	start := time.Now()
	loadArchive(env.Cluster, tar)
	GinkgoWriter.Printf("istio images loaded: %s\n", time.Since(start).Round(time.Second))

	By("rendering Istio with istioctl (offline, CNI mode on)")
	sets := []string{
		"profile=minimal",
		"components.cni.enabled=true",
		"hub=" + istioHub,
		"tag=" + tag,
		"values.global.imagePullPolicy=Never",
		// PLATFORM=openshift on istiod: the injector takes the proxy's UID
		// and GID from a namespace's OpenShift range, as on OpenShift, and
		// 1337 elsewhere. The platform's multus provider is not wanted here
		// (it adds a NetworkAttachmentDefinition kind has no CRD for).
		"values.global.platform=openshift",
		"values.pilot.cni.provider=default",
		"values.cni.provider=default",
		// A small machine: requests only, the limits stay.
		"values.pilot.autoscaleEnabled=false",
		"values.pilot.resources.requests.cpu=50m",
		"values.pilot.resources.requests.memory=128Mi",
		"values.global.proxy.resources.requests.cpu=10m",
		"values.global.proxy.resources.requests.memory=32Mi",
	}
	args := []string{"manifest", "generate"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(tool("ISTIOCTL", "istioctl"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	manifest, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "istioctl manifest generate: %s", stderr.String())
	Expect(string(manifest)).To(ContainSubstring("name: istio-cni-node"), "the Cni component the selector leaves out")
	f := filepath.Join(GinkgoT().TempDir(), "istio.yaml")
	Expect(os.WriteFile(f, manifest, 0o644)).To(Succeed())

	By("applying Istio without its Cni component")
	if _, err := client.CoreV1().Namespaces().Get(ctx, istioNamespace, metav1.GetOptions{}); err != nil {
		_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: istioNamespace}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
	}
	// The CRDs come first in the manifest; anything that needs them
	// established waits for the next try. Forced: on a reused cluster
	// istiod owns fields of its webhooks (caBundle) and patches them again.
	Eventually(ctx, func() error {
		_, err := kubectl("apply", "--server-side", "--force-conflicts", "-l", "operator.istio.io/component!=Cni", "-f", f)
		return err
	}).WithTimeout(testenv.Scale(2 * time.Minute)).WithPolling(2 * time.Second).Should(Succeed())
	ds, err := client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{LabelSelector: "operator.istio.io/component=Cni"})
	Expect(err).NotTo(HaveOccurred())
	Expect(ds.Items).To(BeEmpty(), "Istio's CNI DaemonSet was installed")

	By("waiting for istiod")
	Eventually(ctx, func(g Gomega) {
		d, err := client.AppsV1().Deployments(istioNamespace).Get(ctx, "istiod", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(deploymentAvailable(d)).To(BeTrue(), "istiod: %s", istiodProblem(ctx))
	}).WithTimeout(testenv.Scale(4 * time.Minute)).WithPolling(2 * time.Second).Should(Succeed())
	GinkgoWriter.Printf("istio installed: %s\n", time.Since(start).Round(time.Second))

	By("waiting until the injector injects (a dry-run pod in a labelled namespace)")
	probeNS := newNamespaceWith(ctx, "e2e-istio-probe", map[string]string{"istio-injection": "enabled"}, nil)
	probe := istioPod(istioShape{name: "probe"}, "")
	Eventually(ctx, func(g Gomega) {
		p, err := client.CoreV1().Pods(probeNS).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(findContainer(p, "istio-proxy")).NotTo(BeNil(), "not injected")
		g.Expect(findContainer(p, "istio-validation")).NotTo(BeNil(), "injected without CNI mode")
	}).WithTimeout(testenv.Scale(2 * time.Minute)).WithPolling(2 * time.Second).Should(Succeed())
}

func deploymentAvailable(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue && d.Status.ReadyReplicas > 0
		}
	}
	return false
}

func istiodProblem(ctx context.Context) string {
	pods, err := client.CoreV1().Pods(istioNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=istiod"})
	if err != nil {
		return err.Error()
	}
	var s []string
	for i := range pods.Items {
		s = append(s, pods.Items[i].Name+": "+string(pods.Items[i].Status.Phase)+" "+podProblem(&pods.Items[i]))
	}
	return strings.Join(s, "; ")
}
