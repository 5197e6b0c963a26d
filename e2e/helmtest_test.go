//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The chart's own `helm test`, chart-testing's install cycle and an upgrade
// followed by `helm test`, as chart users and chart CI run them.
var _ = Describe("chart tests", Serial, Ordered, Label("helm-test"), func() {
	BeforeAll(func() {
		if env.Install != "helm" {
			Skip("the chart's tests need a Helm release; this run installed with " + env.Install)
		}
	})

	It("helm test: every node's agent is ready, and the test pod is meshed and redirected, from inside the cluster", func(ctx SpecContext) {
		helmTest()
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

		var setArgs []string
		for _, v := range imageValues(env.MeshImage) {
			setArgs = append(setArgs, "--set="+v)
		}
		cmd := exec.CommandContext(ctx, tool("CT", "ct"), "install",
			"--config", filepath.Join(repoRoot(), "ct.yaml"),
			"--charts", filepath.Join(dir, "mesh-cni"),
			"--helm-extra-set-args", strings.Join(setArgs, " "),
			// ct.yaml's helm-extra-args, with the timeout scaled.
			"--helm-extra-args", "--timeout "+timeoutFlag(10*time.Minute))
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig,
			"PATH="+filepath.Dir(tool("HELM", "helm"))+":"+filepath.Dir(tool("KUBECTL", "kubectl"))+":"+os.Getenv("PATH"))
		b, err := cmd.CombinedOutput()
		GinkgoWriter.Println(string(b))
		Expect(err).NotTo(HaveOccurred(), "ct install: %s", tail(string(b), 60))
		waitNoAgents(ctx)
	})

	// ct install --upgrade would install the chart as it is at the merge
	// base of --target-branch on --remote (ct.yaml: origin/main, from a git
	// worktree) and upgrade that release to the working copy. The suite runs
	// offline on a checkout that need not have that remote, so the upgrade
	// is done here: the suite's release (reinstalled after ct install) is
	// upgraded in place with a change that rolls every agent, and its
	// `helm test` must pass again.
	It("helm upgrade: the release rolls every agent, then helm test passes again", func(ctx SpecContext) {
		before, err := client.AppsV1().DaemonSets(meshNamespace).Get(ctx, daemonSet, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		out, err := run(tool("HELM", "helm"), helmArgs(append(append([]string{"upgrade", release}, chartRef()...),
			"--namespace", meshNamespace, "--reuse-values",
			"--set-string", "podAnnotations.e2e-upgrade="+strconv.FormatInt(time.Now().UnixNano(), 10),
			"--wait", "--timeout", timeoutFlag(5*time.Minute))...)...)
		Expect(err).NotTo(HaveOccurred(), out)
		GinkgoWriter.Println(out)
		after, err := client.AppsV1().DaemonSets(meshNamespace).Get(ctx, daemonSet, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(after.Generation).To(BeNumerically(">", before.Generation), "the upgrade did not change the DaemonSet's pod template")
		waitDaemonSetReady(ctx, client, 3*time.Minute)
		helmTest()
	})
})

// helmTest runs the chart's `helm test` on the suite's release: the
// agents-ready pod, then the redirect pod, must both succeed.
func helmTest() {
	// No --logs: Helm looks every test hook up as a pod in the release's
	// namespace, and our test pods run in a namespace of their own.
	out, err := run(tool("HELM", "helm"), helmArgs("test", release, "--namespace", meshNamespace, "--timeout", timeoutFlag(3*time.Minute))...)
	if err != nil {
		ns := release + "-test"
		pods, _ := kubectl("get", "pods", "-n", ns, "-o", "yaml")
		agents, _ := kubectl("logs", "-n", ns, release+"-test-agents", "--all-containers")
		redirect, _ := kubectl("logs", "-n", ns, release+"-test-redirect", "--all-containers")
		Fail(fmt.Sprintf("helm test: %v\n%s\npods:\n%s\nagents-ready logs:\n%s\nredirect logs:\n%s", err, out, pods, agents, redirect))
	}
	for _, pod := range []string{release + "-test-agents", release + "-test-redirect"} {
		Expect(out).To(MatchRegexp(`TEST SUITE: +`+pod+`\n(.*\n){2}Phase: +Succeeded`), out)
	}
	GinkgoWriter.Println(out)
}

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
