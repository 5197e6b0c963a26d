//go:build e2e

package e2e

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/kindnode"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

const gkeBinDir = "/tmp/mesh-cni-gke-bin"

func provider() *cluster.Provider { return cluster.NewProvider(cluster.ProviderWithDocker()) }

// repoRoot is the module root (the suite runs in e2e/).
func repoRoot() string {
	root, err := testenv.Root()
	Expect(err).NotTo(HaveOccurred())
	return root
}

func setUpCluster(ctx SpecContext) shared {
	root := repoRoot()
	s := shared{
		Cluster: getenv("E2E_CLUSTER", "mesh-cni-e2e"),
		Install: getenv("E2E_INSTALL", "helm"),
		Primary: primaryName(),
	}
	s.Kubeconfig = filepath.Join(os.TempDir(), s.Cluster+".kubeconfig")
	env.Kubeconfig = s.Kubeconfig
	cfg := getenv("E2E_KIND_CONFIG", filepath.Join(root, "kind-configs", "multi-node.yaml"))
	raw, err := os.ReadFile(cfg)
	Expect(err).NotTo(HaveOccurred())
	checkPrimary(s.Primary, raw)
	if f := os.Getenv("E2E_RELEASE"); f != "" {
		s.Release = readRelease(f)
		env.Release = s.Release
		raw = withRegistryConfig(raw)
	}
	p := provider()

	existing, err := p.List()
	Expect(err).NotTo(HaveOccurred())
	reuse := os.Getenv("E2E_REUSE") == "1" && contains(existing, s.Cluster)
	if !reuse {
		if contains(existing, s.Cluster) {
			Expect(deleteCluster(p, s.Cluster, s.Kubeconfig)).To(Succeed())
		}
		if strings.Contains(string(raw), gkeBinDir) {
			// Fresh, so nothing a previous cluster left there can stand in for this install.
			Expect(os.RemoveAll(gkeBinDir)).To(Succeed())
			Expect(os.MkdirAll(gkeBinDir, 0o755)).To(Succeed())
		}
		opts := []cluster.CreateOption{
			cluster.CreateWithRawConfig(raw),
			cluster.CreateWithKubeconfigPath(s.Kubeconfig),
			cluster.CreateWithRetain(os.Getenv("E2E_KEEP") == "1"),
			cluster.CreateWithDisplayUsage(false),
			cluster.CreateWithDisplaySalutation(false),
		}
		if s.Primary == primaryDefault {
			// Without a CNI no node gets Ready: installPrimary waits instead.
			opts = append(opts, cluster.CreateWithWaitForReady(3*time.Minute))
		}
		if img := os.Getenv("E2E_NODE_IMAGE"); img != "" {
			opts = append(opts, cluster.CreateWithNodeImage(img))
		}
		start := time.Now()
		By(fmt.Sprintf("creating kind cluster %s from %s", s.Cluster, filepath.Base(cfg)))
		Expect(p.Create(s.Cluster, opts...)).To(Succeed())
		GinkgoWriter.Printf("kind create: %s\n", time.Since(start).Round(time.Second))
		if strings.Contains(string(raw), gkeBinDir) {
			fillGKEBinDir(s.Cluster)
		}
		env.Cluster = s.Cluster
		installPrimary(ctx, s)
	} else {
		Expect(p.ExportKubeConfig(s.Cluster, s.Kubeconfig, false)).To(Succeed())
	}
	env.Cluster = s.Cluster
	if s.Release != nil {
		By("pointing every node's containerd at the registry " + s.Release["REGISTRY"])
		pointNodesAtRegistry(s.Cluster, s.Release)
	}

	By("loading images from local tarballs")
	tars := strings.Fields(getenv("E2E_IMAGES", ""))
	Expect(tars).NotTo(BeEmpty(), "E2E_IMAGES lists the image tarballs (mesh-cni, test proxy)")
	var meshImage string
	for _, t := range tars {
		tags := archiveTags(t)
		Expect(tags).NotTo(BeEmpty(), "no tags in %s", t)
		if s.Release != nil && !strings.Contains(strings.Join(tags, " "), "testproxy") {
			GinkgoWriter.Printf("not loading %s: mesh-cni comes from the registry\n", t)
			continue
		}
		for _, tag := range tags {
			if strings.Contains(tag, "testproxy") {
				s.ProxyImage = tag
			} else if meshImage == "" {
				meshImage = tag
			}
		}
		loadArchive(s.Cluster, t)
	}
	Expect(s.ProxyImage).NotTo(BeEmpty(), "no testproxy image among %v", tars)
	if s.Release != nil {
		meshImage = releaseImage(s.Release)
	}
	Expect(meshImage).NotTo(BeEmpty(), "no mesh-cni image among %v", tars)

	s.MeshImage = meshImage
	if !reuse || os.Getenv("E2E_REINSTALL") == "1" {
		install(ctx, s, meshImage)
	}
	return s
}

func tearDownCluster() {
	if env.Cluster == "" || os.Getenv("E2E_KEEP") == "1" {
		return
	}
	if CurrentSpecReport().Failed() || os.Getenv("E2E_EXPORT_LOGS") == "1" {
		exportLogs("suite")
	}
	if err := deleteCluster(provider(), env.Cluster, env.Kubeconfig); err != nil {
		GinkgoWriter.Printf("deleting cluster: %v\n", err)
	}
}

// deleteCluster deletes a kind cluster. A node that Docker cannot stop
// because a cgroup inside it stayed frozen (internal/testsupport/kindnode) is thawed, and
// the delete tried again.
func deleteCluster(p *cluster.Provider, name, kubeconfig string) error {
	var err error
	for range 3 {
		if err = p.Delete(name, kubeconfig); err == nil {
			return nil
		}
		n, terr := kindnode.ThawCluster(name)
		GinkgoWriter.Printf("deleting cluster %s: %v; thawed %d frozen cgroups (%v), trying again\n", name, err, n, terr)
	}
	return err
}

func loadArchive(name, path string) {
	nodes, err := provider().ListInternalNodes(name)
	Expect(err).NotTo(HaveOccurred())
	for _, n := range nodes {
		f, err := os.Open(path)
		Expect(err).NotTo(HaveOccurred())
		err = nodeutils.LoadImageArchive(n, f)
		f.Close()
		Expect(err).NotTo(HaveOccurred(), "loading %s into %s", path, n.String())
	}
}

// archiveTags reads the RepoTags of a `docker save` tarball.
func archiveTags(path string) []string {
	f, err := os.Open(path)
	Expect(err).NotTo(HaveOccurred(), "image tarball %s (built by make e2e-images)", path)
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		Expect(err).NotTo(HaveOccurred())
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct{ RepoTags []string }
		Expect(json.NewDecoder(tr).Decode(&m)).To(Succeed())
		var tags []string
		for _, e := range m {
			tags = append(tags, e.RepoTags...)
		}
		return tags
	}
}

// fillGKEBinDir puts the node's reference plugins into the shared host dir
// mounted at /home/kubernetes/bin, as GKE's node set-up does.
func fillGKEBinDir(name string) {
	nodes, err := provider().ListNodes(name)
	Expect(err).NotTo(HaveOccurred())
	Expect(nodes).NotTo(BeEmpty())
	Expect(nodes[0].Command("sh", "-c", "cp -a /opt/cni/bin/. /home/kubernetes/bin/").Run()).To(Succeed())
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// run runs a command and returns its combined output.
func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// timeoutFlag is d, scaled by MESH_CNI_TEST_TIMEOUT_SCALE, as the value
// of a helm or kubectl --timeout.
func timeoutFlag(d time.Duration) string { return testenv.Scale(d).String() }

func kubectl(args ...string) (string, error) {
	return run(tool("KUBECTL", "kubectl"), append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
}

// tool finds a binary: $ENV, else the shared cache, else PATH.
func tool(envName, name string) string {
	if v := os.Getenv(envName); v != "" {
		return v
	}
	cache := getenv("MESH_CNI_CACHE", "/var/cache/mesh-cni")
	for _, p := range []string{
		filepath.Join(cache, "k8s", testenv.KubernetesVersion, "bin", name),
		filepath.Join(cache, "tools", "bin", name),
	} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return name
}
