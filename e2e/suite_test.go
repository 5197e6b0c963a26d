//go:build e2e

// Package e2e proves mesh-cni on real kind clusters: the suite creates a
// cluster from a kind-configs/ file, loads the images from local tarballs,
// installs mesh-cni (Helm or a kustomize overlay) and checks what the pods'
// traffic does. Settings come from the environment (see README.md).
package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "mesh-cni e2e")
}

// shared is what process 1 sets up and hands to every process.
type shared struct {
	Cluster    string `json:"cluster"`
	Kubeconfig string `json:"kubeconfig"`
	ProxyImage string `json:"proxyImage"`
	MeshImage  string `json:"meshImage"`
	Install    string `json:"install"`
	Primary    string `json:"primary"`
	// Release is hack/release.sh's release.env when mesh-cni comes from a registry.
	Release map[string]string `json:"release,omitempty"`
}

var (
	env    shared
	client *kubernetes.Clientset
)

var _ = SynchronizedBeforeSuite(func(ctx SpecContext) []byte {
	s := setUpCluster(ctx)
	b, err := json.Marshal(s)
	Expect(err).NotTo(HaveOccurred())
	return b
}, func(b []byte) {
	Expect(json.Unmarshal(b, &env)).To(Succeed())
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	cfg.QPS, cfg.Burst = 50, 100
	client, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(20*time.Minute))

var _ = SynchronizedAfterSuite(func() {}, func() {
	tearDownCluster()
})

// On failure, export the cluster's logs (kind export logs) for reading.
var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() && env.Cluster != "" {
		exportLogs(fmt.Sprintf("%s-%d", sanitize(r.LeafNodeText), time.Now().Unix()))
	}
})

func exportLogs(name string) {
	dir := filepath.Join(artifacts(), name)
	// Partial errors are common (no crictl in the offline image); the rest is still written.
	if err := provider().CollectLogs(env.Cluster, dir); err != nil {
		GinkgoWriter.Printf("collecting logs (partly): %v\n", err)
	}
	GinkgoWriter.Printf("cluster logs in %s\n", dir)
}

func artifacts() string {
	if d := os.Getenv("E2E_ARTIFACTS"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "mesh-cni-e2e-logs")
}

func sanitize(s string) string {
	out := []rune{}
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			out = append(out, r)
		} else if len(out) > 0 && out[len(out)-1] != '-' {
			out = append(out, '-')
		}
		if len(out) > 60 {
			break
		}
	}
	return string(out)
}

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
