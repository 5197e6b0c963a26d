//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/mesh-cni/mesh-cni/pkg/testenv"
)

// The chart's own `helm test` and chart-testing's install cycle, as chart
// users and chart CI run them.
var _ = Describe("chart tests", Serial, Ordered, Label("helm-test"), func() {
	BeforeAll(func() {
		if env.Install != "helm" {
			Skip("the chart's tests need a Helm release; this run installed with " + env.Install)
		}
	})

	It("helm test: the test pod is meshed and redirected, from inside the cluster", func(ctx SpecContext) {
		// No --logs: Helm looks every test hook up as a pod in the release's
		// namespace, and ours are a namespace and a pod in it.
		out, err := run(tool("HELM", "helm"), helmArgs("test", release, "--namespace", meshNamespace, "--timeout", "3m")...)
		if err != nil {
			ns := release + "-test"
			pods, _ := kubectl("get", "pods", "-n", ns, "-o", "yaml")
			logs, _ := kubectl("logs", "-n", ns, release+"-test-redirect", "--all-containers")
			Fail(fmt.Sprintf("helm test: %v\n%s\npods:\n%s\nlogs:\n%s", err, out, pods, logs))
		}
		Expect(out).To(MatchRegexp(`TEST SUITE: +`+release+`-test-redirect\n(.*\n){2}Phase: +Succeeded`), out)
		GinkgoWriter.Println(out)
	})

	It("ct install: installs the chart in a fresh namespace, runs its helm test, removes it", func(ctx SpecContext) {
		By("removing the suite's release: two agents must not chain on one node")
		uninstall(ctx)
		DeferCleanup(func(ctx SpecContext) { reinstall(ctx) })

		// chart-testing installs once per ci/*-values.yaml; those are for
		// other platforms (paths, SCCs), so it gets the chart without them.
		dir := GinkgoT().TempDir()
		out, err := run("cp", "-r", filepath.Join(repoRoot(), "charts", "mesh-cni"), dir)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(os.RemoveAll(filepath.Join(dir, "mesh-cni", "ci"))).To(Succeed())

		repo, tag := splitImage(env.MeshImage)
		cmd := exec.CommandContext(ctx, tool("CT", "ct"), "install",
			"--config", filepath.Join(repoRoot(), "ct.yaml"),
			"--charts", filepath.Join(dir, "mesh-cni"),
			"--helm-extra-set-args", "--set=image.repository="+repo+" --set=image.tag="+tag)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig,
			"PATH="+filepath.Dir(tool("HELM", "helm"))+":"+filepath.Dir(tool("KUBECTL", "kubectl"))+":"+os.Getenv("PATH"))
		b, err := cmd.CombinedOutput()
		GinkgoWriter.Println(string(b))
		Expect(err).NotTo(HaveOccurred(), "ct install: %s", tail(string(b), 60))
		waitNoAgents(ctx)
	})
})

// tail keeps the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitNoAgents waits until no agent pod of any release runs: ct removed its
// release (and so our chain entry) before the suite installs again.
func waitNoAgents(ctx context.Context) {
	Eventually(ctx, func() string {
		out, _ := kubectl("get", "pods", "-A", "-l", "app.kubernetes.io/name=mesh-cni,app.kubernetes.io/component=node-agent", "-o", "name")
		return strings.TrimSpace(out)
	}).WithTimeout(testenv.Scale(3 * time.Minute)).WithPolling(2 * time.Second).Should(BeEmpty())
}
