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

	"github.com/mesh-cni/mesh-cni/pkg/testenv"
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
	repo, tag := splitImage(image)
	switch s.Install {
	case "helm":
		By(fmt.Sprintf("helm install %s (image %s)", release, image))
		helmInstall(repo, tag)
	case "kustomize":
		By(fmt.Sprintf("kustomize build of an overlay (image %s) | kubectl apply", image))
		kustomizeInstall(repo, tag)
	default:
		Fail("E2E_INSTALL must be helm or kustomize, got " + s.Install)
	}
	cs := clientFor(s.Kubeconfig)
	waitDaemonSetReady(ctx, cs, 3*time.Minute)
}

func helmArgs(args ...string) []string {
	return append(args, "--kubeconfig", env.Kubeconfig)
}

func helmInstall(repo, tag string, extra ...string) {
	args := helmArgs("upgrade", "--install", release, filepath.Join(repoRoot(), "charts", "mesh-cni"),
		"--namespace", meshNamespace, "--create-namespace",
		"--set", "image.repository="+repo, "--set", "image.tag="+tag,
		// Kuma and Consul are off by default; the four-meshes spec needs them.
		"--set", "meshes.kuma.enabled=true", "--set", "meshes.consul.enabled=true",
		"--wait", "--timeout", timeoutFlag(5*time.Minute))
	// E2E_HELM_SET: extra --set values, e.g. platform=gke for kind-configs/gke-like.yaml.
	for _, kv := range strings.Fields(os.Getenv("E2E_HELM_SET")) {
		args = append(args, "--set", kv)
	}
	out, err := run(tool("HELM", "helm"), append(args, extra...)...)
	Expect(err).NotTo(HaveOccurred(), out)
}

// kustomizeInstall builds an overlay of kustomize/base that sets the image,
// the way users write their own overlay, and applies it.
func kustomizeInstall(repo, tag string) {
	dir, err := os.MkdirTemp("", "mesh-cni-overlay-")
	Expect(err).NotTo(HaveOccurred())
	defer os.RemoveAll(dir)
	// kustomize takes only relative paths to other roots.
	base, err := filepath.Rel(dir, filepath.Join(repoRoot(), "kustomize", "base"))
	Expect(err).NotTo(HaveOccurred())
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: mesh-cni
  newName: %s
  newTag: %q
`, base, repo, tag)
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
	Eventually(ctx, func(g Gomega) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		ds, err := cs.AppsV1().DaemonSets(meshNamespace).Get(ctx, daemonSet, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ds.Status.DesiredNumberScheduled).To(BeEquivalentTo(len(nodes.Items)))
		g.Expect(ds.Status.NumberReady).To(Equal(ds.Status.DesiredNumberScheduled))
		g.Expect(ds.Status.UpdatedNumberScheduled).To(Equal(ds.Status.DesiredNumberScheduled))
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
