//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

const (
	meshNamespace = "mesh-cni"
	release       = "mesh-cni"
	daemonSet     = "mesh-cni"
)

// install puts mesh-cni on the cluster with Helm or a kustomize overlay and
// waits until the DaemonSet is ready on every node.
func install(ctx context.Context, s shared, image string) {
	env.Kubeconfig = s.Kubeconfig
	switch s.Install {
	case "helm":
		By(fmt.Sprintf("helm install %s from %s (image %s)", release, chartRef()[0], image))
		helmInstall(image)
	case "kustomize":
		By(fmt.Sprintf("kustomize build of an overlay (image %s) | kubectl apply", image))
		kustomizeInstall(image)
	default:
		Fail("E2E_INSTALL must be helm or kustomize, got " + s.Install)
	}
	cs := clientFor(s.Kubeconfig)
	waitDaemonSetReady(ctx, cs, 3*time.Minute)
}

func helmArgs(args ...string) []string {
	return append(args, "--kubeconfig", env.Kubeconfig)
}

// chartRef is the chart Helm installs: the release's from oci:// when the
// suite runs against a registry, else the source tree's.
func chartRef() []string {
	if env.Release != nil {
		return chartRefOf(env.Release)
	}
	return []string{filepath.Join(repoRoot(), "charts", "mesh-cni")}
}

// chartRefOf is a release's chart in the registry, by version.
func chartRefOf(rel map[string]string) []string {
	return []string{rel["CHART"], "--version", rel["CHART_VERSION"], "--plain-http"}
}

// imageSets are the Helm values that make the chart run image: none for the
// release's own image (its chart pins it by digest), else the repository
// with a tag or a digest (clearing the other).
func imageSets(image string) []string {
	if env.Release != nil && image == releaseImage(env.Release) {
		return nil
	}
	var sets []string
	for _, v := range imageValues(image) {
		sets = append(sets, "--set", v)
	}
	return sets
}

// imageValues are the chart values of image, by digest or by tag.
func imageValues(image string) []string {
	if repo, digest, ok := strings.Cut(image, "@"); ok {
		return []string{"image.repository=" + repo, "image.digest=" + digest, "image.tag="}
	}
	repo, tag := splitImage(image)
	return []string{"image.repository=" + repo, "image.tag=" + tag, "image.digest="}
}

func helmInstall(image string, extra ...string) {
	args := append([]string{"upgrade", "--install", release}, chartRef()...)
	args = append(args, imageSets(image)...)
	args = helmArgs(append(args, "--namespace", meshNamespace, "--create-namespace",
		// Kuma and Consul are off by default; the four-meshes spec needs them.
		"--set", "meshes.kuma.enabled=true", "--set", "meshes.consul.enabled=true",
		// explain --check asks the pod-rules container (off by default).
		"--set", "podRules.enabled=true",
		"--wait", "--timeout", timeoutFlag(5*time.Minute))...)
	// E2E_HELM_SET: extra --set values, e.g. platform=gke for kind-configs/gke-like.yaml.
	for _, kv := range strings.Fields(os.Getenv("E2E_HELM_SET")) {
		args = append(args, "--set", kv)
	}
	out, err := run(tool("HELM", "helm"), append(args, extra...)...)
	Expect(err).NotTo(HaveOccurred(), out)
}

// kustomizeInstall builds an overlay of kustomize/base (or of
// E2E_KUSTOMIZE_OVERLAY, e.g. overlays/gke) that sets the image, by digest
// when it has one, the way users write their own overlay, and applies it.
func kustomizeInstall(image string) {
	dir, err := os.MkdirTemp("", "mesh-cni-overlay-")
	Expect(err).NotTo(HaveOccurred())
	defer os.RemoveAll(dir)
	// kustomize takes only relative paths to other roots.
	base, err := filepath.Rel(dir, filepath.Join(repoRoot(), "kustomize", getenv("E2E_KUSTOMIZE_OVERLAY", "base")))
	Expect(err).NotTo(HaveOccurred())
	var pin string
	if repo, digest, ok := strings.Cut(image, "@"); ok {
		pin = fmt.Sprintf("  newName: %s\n  digest: %s\n", repo, digest)
	} else {
		repo, tag := splitImage(image)
		pin = fmt.Sprintf("  newName: %s\n  newTag: %q\n", repo, tag)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: mesh-cni
%s`, base, pin)
	Expect(os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644)).To(Succeed())
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = types.LoadRestrictionsNone
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	Expect(err).NotTo(HaveOccurred())
	y, err := m.AsYaml()
	Expect(err).NotTo(HaveOccurred())
	f := filepath.Join(dir, "all.yaml")
	Expect(os.WriteFile(f, y, 0o644)).To(Succeed())
	out, err := kubectl("apply", "--server-side", "-f", f)
	Expect(err).NotTo(HaveOccurred(), out)
}

func waitDaemonSetReady(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) {
	By("waiting for the DaemonSet to be ready on every node")
	waitDaemonSetOnEveryNode(ctx, cs, meshNamespace, daemonSet, timeout, dsWait{updated: true})
}

// dsWait says what else waitDaemonSetOnEveryNode waits for.
type dsWait struct {
	nodesReady bool // at least one node, and every node Ready
	updated    bool // every pod runs the DaemonSet's current template
}

// waitDaemonSetOnEveryNode waits (timeout scaled) until the DaemonSet
// ns/name is scheduled and ready on every node, and for what w adds.
func waitDaemonSetOnEveryNode(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration, w dsWait) {
	Eventually(ctx, func(g Gomega) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		if w.nodesReady {
			g.Expect(nodes.Items).NotTo(BeEmpty())
			for _, n := range nodes.Items {
				g.Expect(nodeReady(&n)).To(BeTrue(), "node %s is not Ready", n.Name)
			}
		}
		ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ds.Status.DesiredNumberScheduled).To(BeEquivalentTo(len(nodes.Items)))
		g.Expect(ds.Status.NumberReady).To(Equal(ds.Status.DesiredNumberScheduled))
		if w.updated {
			g.Expect(ds.Status.UpdatedNumberScheduled).To(Equal(ds.Status.DesiredNumberScheduled))
		}
	}).WithTimeout(testenv.Scale(timeout)).WithPolling(2 * time.Second).Should(Succeed())
}

func clientFor(kubeconfig string) *kubernetes.Clientset {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	cs, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	return cs
}

func splitImage(image string) (repo, tag string) {
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return image, "latest"
	}
	return image[:i], image[i+1:]
}
