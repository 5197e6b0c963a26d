//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// The primary CNI mesh-cni chains after. By default it is the one kind
// installs itself (meshnet in the offline node image, kindnet in stock
// images); E2E_PRIMARY=flannel installs flannel after the cluster starts,
// from hack/flannel/kube-flannel.yml and the images in E2E_PRIMARY_IMAGES
// (hack/build-flannel.sh), on a kind config with disableDefaultCNI;
// E2E_PRIMARY=cilium installs Cilium's chart (cilium_test.go).
const (
	primaryDefault = "default"
	primaryFlannel = "flannel"
	primaryCilium  = "cilium"

	flannelNamespace = "kube-flannel"
	flannelDaemonSet = "kube-flannel-ds"
	flannelConfigMap = "kube-flannel-cfg"
	flannelConflist  = confDir + "/10-flannel.conflist"
)

func primaryName() string { return getenv("E2E_PRIMARY", primaryDefault) }

// checkPrimary refuses a kind config that does not fit the primary: kind's
// own CNI next to flannel, or no CNI at all.
func checkPrimary(primary string, kindConfig []byte) {
	var c struct {
		Networking struct {
			DisableDefaultCNI bool `json:"disableDefaultCNI"`
		} `json:"networking"`
	}
	Expect(yaml.Unmarshal(kindConfig, &c)).To(Succeed())
	switch primary {
	case primaryDefault:
		Expect(c.Networking.DisableDefaultCNI).To(BeFalse(),
			"the kind config disables kind's CNI: set E2E_PRIMARY to the primary to install")
	case primaryFlannel, primaryCilium:
		Expect(c.Networking.DisableDefaultCNI).To(BeTrue(),
			"E2E_PRIMARY=%s needs a kind config with networking.disableDefaultCNI (kind-configs/%s.yaml)", primary, primary)
	default:
		Fail("E2E_PRIMARY must be " + primaryDefault + ", " + primaryFlannel + " or " + primaryCilium + ", got " + primary)
	}
}

// installPrimary installs the primary CNI on a new cluster and waits until
// every node is Ready; kind's own CNI needs nothing.
func installPrimary(ctx context.Context, s shared) {
	if s.Primary == primaryCilium {
		installCilium(ctx, s)
		return
	}
	if s.Primary != primaryFlannel {
		return
	}
	By("loading flannel's images")
	tars := strings.Fields(os.Getenv("E2E_PRIMARY_IMAGES"))
	Expect(tars).NotTo(BeEmpty(), "E2E_PRIMARY_IMAGES lists flannel's image tarball (hack/build-flannel.sh)")
	for _, t := range tars {
		loadArchive(s.Cluster, t)
	}
	manifest := getenv("E2E_PRIMARY_MANIFEST", filepath.Join(repoRoot(), "hack", "flannel", "kube-flannel.yml"))
	By("kubectl apply -f " + manifest)
	out, err := kubectl("apply", "-f", manifest)
	Expect(err).NotTo(HaveOccurred(), out)
	cs := clientFor(s.Kubeconfig)
	start := time.Now()
	waitPrimaryReady(ctx, cs)
	GinkgoWriter.Printf("flannel ready on every node: %s\n", time.Since(start).Round(time.Second))
}

// waitPrimaryReady waits for flannel's DaemonSet on every node and every
// node Ready (the runtime reports the network ready once a conflist exists).
func waitPrimaryReady(ctx context.Context, cs kubernetes.Interface) {
	By("waiting for flannel on every node and every node Ready")
	waitDaemonSetOnEveryNode(ctx, cs, flannelNamespace, flannelDaemonSet, 4*time.Minute, dsWait{nodesReady: true})
}

// primaryPods says where the primary's node pods run: restarting one makes
// it write its conflist afresh (meshnet at start, flannel's install-cni
// init container).
func primaryPods() (namespace string, apps []string) {
	switch env.Primary {
	case primaryFlannel:
		return flannelNamespace, []string{"flannel"}
	case primaryCilium:
		return "kube-system", []string{ciliumApp}
	}
	return "kube-system", []string{"meshnet", "kindnet"}
}

// isPrimaryPod tells a node pod of the primary by its app label (Cilium's
// agents carry k8s-app).
func isPrimaryPod(p *corev1.Pod, apps []string) bool {
	return contains(apps, p.Labels["app"]) || contains(apps, p.Labels["k8s-app"])
}

// primaryHasWritten tells whether a (new) pod of the primary has written
// its conflist at path: meshnet and kindnet log the write; flannel's
// install-cni init container has written it once it exited 0
// (install-conf renames the file in before it exits).
func primaryHasWritten(ctx context.Context, p *corev1.Pod, path string) bool {
	if env.Primary == primaryCilium {
		return ciliumWrites(ctx, p) > 0
	}
	if env.Primary == primaryFlannel {
		for _, s := range p.Status.InitContainerStatuses {
			if t := s.State.Terminated; s.Name == "install-cni" && t != nil && t.ExitCode == 0 {
				return true
			}
		}
		return false
	}
	logs, err := client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	return err == nil && strings.Contains(string(logs), "wrote ") && strings.Contains(string(logs), filepath.Base(path))
}

// primaryBinary is a CNI binary of the primary's that must outlive mesh-cni's uninstall.
func primaryBinary() string {
	switch env.Primary {
	case primaryFlannel:
		return "flannel"
	case primaryCilium:
		return "cilium-cni"
	}
	return "ptp"
}

// primaryWrote returns the conflist the primary writes, when the suite
// knows it byte for byte: flannel's install-cni copies cni-conf.json of its
// ConfigMap verbatim.
func primaryWrote(ctx context.Context) (string, bool) {
	if env.Primary != primaryFlannel {
		return "", false
	}
	cm, err := client.CoreV1().ConfigMaps(flannelNamespace).Get(ctx, flannelConfigMap, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	conf, ok := cm.Data["cni-conf.json"]
	Expect(ok).To(BeTrue(), "cni-conf.json in ConfigMap %s/%s", flannelNamespace, flannelConfigMap)
	return conf, true
}
