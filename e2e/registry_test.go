//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// With E2E_RELEASE (hack/e2e-registry.sh sets it), mesh-cni comes from a real
// OCI registry as users get it: the release's chart from oci:// (Helm) or
// kustomize with the image by digest, the nodes pulling the image through
// containerd's registry config. No `kind load` on that path.

// registryHostsDir is where containerd looks up a registry's hosts.toml
// once the cri plugin's config_path names it.
const registryHostsDir = "/etc/containerd/certs.d"

// readRelease reads hack/release.sh's release.env.
func readRelease(path string) map[string]string {
	f, err := os.Open(path)
	Expect(err).NotTo(HaveOccurred(), "E2E_RELEASE")
	defer f.Close()
	rel := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), "="); ok {
			rel[k] = v
		}
	}
	Expect(s.Err()).NotTo(HaveOccurred())
	for _, k := range []string{"REGISTRY", "IMAGE", "IMAGE_DIGEST", "CHART", "CHART_VERSION", "CHART_DIGEST", "COSIGN_PUB"} {
		Expect(rel[k]).NotTo(BeEmpty(), "%s has no %s", path, k)
	}
	return rel
}

// releaseImage is the release's image index, by digest.
func releaseImage(rel map[string]string) string {
	return rel["REGISTRY"] + "/mesh-cni@" + rel["IMAGE_DIGEST"]
}

// withRegistryConfig turns on containerd's per-registry hosts directory in
// a kind config (kind's local-registry pattern).
func withRegistryConfig(raw []byte) []byte {
	var cfg map[string]any
	Expect(yaml.Unmarshal(raw, &cfg)).To(Succeed())
	patches, _ := cfg["containerdConfigPatches"].([]any)
	cfg["containerdConfigPatches"] = append(patches,
		"[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \""+registryHostsDir+"\"")
	out, err := yaml.Marshal(cfg)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// pointNodesAtRegistry makes every node resolve the release's registry
// (localhost:<port> on this host) to this host as its network gateway sees
// it, over plain HTTP.
func pointNodesAtRegistry(cluster string, rel map[string]string) {
	registry := rel["REGISTRY"]
	_, port, ok := strings.Cut(registry, ":")
	Expect(ok).To(BeTrue(), "REGISTRY %q has no port", registry)
	nodes, err := provider().ListNodes(cluster)
	Expect(err).NotTo(HaveOccurred())
	for _, n := range nodes {
		script := fmt.Sprintf(`set -e
gw=$(ip -4 route show default | awk '{print $3; exit}')
[ -n "$gw" ]
mkdir -p %[1]s/%[2]s
printf '[host."http://%%s:%[3]s"]\n  capabilities = ["pull", "resolve"]\n' "$gw" >%[1]s/%[2]s/hosts.toml
cat %[1]s/%[2]s/hosts.toml`, registryHostsDir, registry, port)
		out, err := nodeExec(n, "sh", "-c", script)
		Expect(err).NotTo(HaveOccurred(), out)
		GinkgoWriter.Printf("%s: %s", n.String(), out)
	}
}

var _ = Describe("install from the registry", Ordered, Label("registry", "smoke"), func() {
	BeforeAll(func() {
		if env.Release == nil {
			Skip("mesh-cni was not installed from a registry (E2E_RELEASE is unset: hack/e2e-registry.sh sets it)")
		}
	})

	It("the chart and the image verify with the release's key, and the SBOMs of both platforms too", func() {
		cosign := filepath.Join(releaseTools(), "cosign")
		verify := func(sub string, args ...string) {
			args = append([]string{sub, "--key", env.Release["COSIGN_PUB"], "--insecure-ignore-tlog=true"}, args...)
			out, err := exec.Command(cosign, args...).CombinedOutput()
			Expect(err).NotTo(HaveOccurred(), "cosign %s\n%s", strings.Join(args, " "), out)
		}
		verify("verify", releaseImage(env.Release))
		verify("verify", env.Release["REGISTRY"]+"/charts/mesh-cni@"+env.Release["CHART_DIGEST"])
		for _, arch := range []string{"AMD64", "ARM64"} {
			verify("verify-attestation", "--type", "spdxjson", env.Release["REGISTRY"]+"/mesh-cni@"+env.Release["IMAGE_DIGEST_"+arch])
		}
	})

	It("every agent runs the release's image, pulled by digest from the registry", func(ctx SpecContext) {
		pods, err := client.CoreV1().Pods(meshNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node-agent"})
		Expect(err).NotTo(HaveOccurred())
		Expect(pods.Items).NotTo(BeEmpty())
		want := releaseImage(env.Release)
		for _, p := range pods.Items {
			for _, c := range p.Spec.Containers {
				Expect(c.Image).To(Equal(want), "%s/%s runs %s", p.Name, c.Name, c.Image)
			}
			for _, st := range p.Status.ContainerStatuses {
				// containerd reports the digest the image was pulled by: the index's.
				Expect(st.ImageID).To(Equal(want), "%s/%s: imageID", p.Name, st.Name)
			}
		}
	})
})

// releaseTools is hack/build-tools.sh's directory (crane, cosign, registry).
func releaseTools() string {
	out, err := run("bash", filepath.Join(repoRoot(), "hack", "build-tools.sh"), "crane", "cosign", "registry")
	Expect(err).NotTo(HaveOccurred(), out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
