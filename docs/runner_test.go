package docs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/ctl/check"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/doctest"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// obj is what a rendered object contributes to name checks.
type obj struct {
	Kind, Namespace, Name string
	PodLabels             map[string]string // a DaemonSet's pod template labels
	Data                  map[string]string // a ConfigMap's data
}

type runner struct {
	root, work                string // the checkout; the current block's dir
	helm, ctl, plugin         string // binaries; plugin is ctl as kubectl-mesh_cni
	env                       *testenv.Env
	livePod                   bool // the example pod and its node are in env
	kubeconfig, version       string
	metricsPort, probePort    string
	objects                   []obj
	releases                  map[string]string // release → namespace
	later                     []func(t *testing.T)
	ran                       int
	where                     string // file:line of the current command
	pipedIn                   bool   // the current command reads a pipe
	kubeVersion, imageArchive string
}

func newRunner(t *testing.T) *runner {
	root := testenv.RepoRoot(t)
	bin := t.TempDir()
	env := testenv.Start(t)
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{
		root:        root,
		helm:        helmBinary(t, root),
		ctl:         goBuild(t, root, bin, "mesh-cnictl", "./cmd/mesh-cnictl"),
		plugin:      filepath.Join(bin, "kubectl-mesh_cni"),
		env:         env,
		kubeconfig:  env.Kubeconfig,
		version:     strings.TrimSpace(string(v)),
		releases:    map[string]string{},
		kubeVersion: strings.TrimPrefix(testenv.KubernetesVersion, "v"),
	}
	if err := os.Symlink(r.ctl, r.plugin); err != nil {
		t.Fatal(err)
	}
	r.imageArchive = "/var/cache/mesh-cni/images/mesh-cni-" + r.version + ".tar"
	var values struct {
		Probes  struct{ Port int } `json:"probes"`
		Metrics struct{ Port int } `json:"metrics"`
	}
	b, err := os.ReadFile(filepath.Join(root, "charts/mesh-cni/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	r.metricsPort, r.probePort = fmt.Sprint(values.Metrics.Port), fmt.Sprint(values.Probes.Port)
	return r
}

func (r *runner) errorf(t *testing.T, format string, a ...any) {
	t.Helper()
	t.Errorf("%s: %s", r.where, fmt.Sprintf(format, a...))
}

// block runs one sh block in a fresh dir that sees the checkout's chart and
// kustomize trees, as a reader's working copy would.
func (r *runner) block(t *testing.T, b doctest.Block) {
	if b.Release() {
		return // hack/release_test.go runs these against a real release
	}
	if b.External() {
		for _, c := range b.Commands {
			r.where = fmt.Sprintf("%s:%d", b.File, c.Line)
			for _, argv := range c.Pipeline {
				if !map[string]bool{"linkerd": true, "istioctl": true, "kubectl": true, "openssl": true}[argv[0]] {
					r.errorf(t, "external block runs %q; only linkerd, istioctl, kubectl and openssl are expected there", argv[0])
				}
			}
		}
		return
	}
	r.work = t.TempDir()
	for _, d := range []string{"charts", "kustomize"} {
		if err := os.Symlink(filepath.Join(r.root, d), filepath.Join(r.work, d)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range b.Commands {
		r.where = fmt.Sprintf("%s:%d", b.File, c.Line)
		r.ran++
		r.command(t, c)
	}
}

func (r *runner) command(t *testing.T, c doctest.Command) {
	if c.Stdin != "" {
		p := filepath.Join(r.work, c.Redirect)
		if err := os.WriteFile(p, []byte(c.Stdin), 0o644); err != nil {
			r.errorf(t, "%v", err)
		}
		return
	}
	if c.Redirect != "" && !(c.Pipeline[0][0] == "kubectl" && len(c.Pipeline) == 1) {
		r.errorf(t, "only kubectl get output is redirected in the docs")
		return
	}
	for i, argv := range c.Pipeline {
		r.pipedIn = i > 0
		if r.pipedIn && argv[0] == "grep" {
			continue
		}
		switch argv[0] {
		case "helm":
			r.helmCmd(t, argv)
		case "kustomize":
			if len(argv) != 3 || argv[1] != "build" {
				r.errorf(t, "kustomize: only \"kustomize build DIR\" is expected")
				continue
			}
			r.kustomize(t, argv[2])
		case "kubectl":
			r.kubectl(t, argv[1:], c.Redirect)
		case "mesh-cnictl":
			r.meshCNICtl(t, r.ctl, argv)
		case "mesh-cni":
			// The plugin binary has no explain; only mesh-cnictl does.
			r.errorf(t, "%s: the plugin binary only knows \"version\"; show mesh-cnictl explain instead", strings.Join(argv, " "))
		case "make":
			r.make(t, argv)
		case "kind":
			if strings.Join(argv[:len(argv)-1], " ") != "kind load image-archive" || argv[len(argv)-1] != r.imageArchive {
				r.errorf(t, "kind: expected \"kind load image-archive %s\" (make image-tar's output)", r.imageArchive)
			}
		case "mkdir":
			if len(argv) != 3 || argv[1] != "-p" {
				r.errorf(t, "mkdir: only \"mkdir -p DIR\"")
				continue
			}
			os.MkdirAll(filepath.Join(r.work, argv[2]), 0o755)
		case "cat", "ls":
			r.nodePaths(t, argv[1:])
		case "journalctl":
			r.journalctl(t, argv[1:])
		case "curl":
			r.curl(t, argv[1:])
		default:
			r.errorf(t, "no check for command %q: add one to docs/runner_test.go", argv[0])
		}
	}
}

// run runs a binary in the block's dir and returns its output and exit code.
func (r *runner) run(t *testing.T, bin string, args ...string) (string, string, int) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = r.work
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode()
	}
	if err != nil {
		r.errorf(t, "run %s: %v", bin, err)
		return "", "", -1
	}
	return out.String(), errb.String(), 0
}

// helmCmd runs template and lint for real; install and upgrade are
// rendered with helm template and the same chart, values and flags.
func (r *runner) helmCmd(t *testing.T, argv []string) {
	if len(argv) < 2 {
		r.errorf(t, "helm without a subcommand")
		return
	}
	sub, args := argv[1], argv[2:]
	valued := map[string]bool{"-n": true, "--namespace": true, "-f": true, "--values": true, "--set": true,
		"--set-string": true, "--set-file": true, "--kube-version": true, "--timeout": true, "--version": true}
	dropped := map[string]bool{"--reuse-values": true, "--install": true, "--atomic": true, "--wait": true, "--timeout": true}
	known := map[string]bool{"--create-namespace": true, "--reuse-values": true, "--install": true, "--atomic": true,
		"--wait": true, "--strict": true, "--dry-run": true}
	var pos, flags []string
	ns := "default"
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case valued[a] && i+1 < len(args):
			if a == "-n" || a == "--namespace" {
				ns = args[i+1]
			}
			if !dropped[a] {
				flags = append(flags, a, args[i+1])
			}
			i++
		case known[a]:
			if !dropped[a] {
				flags = append(flags, a)
			}
		case strings.HasPrefix(a, "-"):
			r.errorf(t, "helm %s: flag %s is not one the docs test knows; add it to docs/runner_test.go", sub, a)
			return
		default:
			pos = append(pos, a)
		}
	}
	if !contains(flags, "--kube-version") {
		flags = append(flags, "--kube-version", r.kubeVersion)
	}
	if contains(flags, "metrics.certManager.enabled=true") {
		// The docs turn cert-manager on for a cluster that has it.
		flags = append(flags, "--api-versions", "cert-manager.io/v1")
	}
	switch sub {
	case "install", "upgrade", "template":
		if len(pos) != 2 {
			r.errorf(t, "helm %s: want RELEASE CHART, got %q", sub, pos)
			return
		}
		if sub == "upgrade" {
			flags = removeFlag(flags, "--create-namespace")
		}
		out, errs, code := r.run(t, r.helm, append([]string{"template", pos[0], pos[1]}, flags...)...)
		if code != 0 {
			r.errorf(t, "helm template (for helm %s) failed:\n%s", sub, errs)
			return
		}
		r.releases[pos[0]] = ns
		r.addObjects(t, out)
	case "lint":
		if _, errs, code := r.run(t, r.helm, append([]string{"lint"}, append(flags, pos...)...)...); code != 0 {
			r.errorf(t, "helm lint failed:\n%s", errs)
		}
	case "uninstall":
		if len(pos) != 1 {
			r.errorf(t, "helm uninstall: want RELEASE")
			return
		}
		where := r.where
		r.later = append(r.later, func(t *testing.T) {
			if got, ok := r.releases[pos[0]]; !ok || got != ns {
				t.Errorf("%s: helm uninstall %s -n %s: the docs never install that release there", where, pos[0], ns)
			}
		})
	default:
		r.errorf(t, "helm %s: no check for it", sub)
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func removeFlag(l []string, f string) []string {
	var out []string
	for _, x := range l {
		if x != f {
			out = append(out, x)
		}
	}
	return out
}

// kustomize builds dir with the kustomize API, as kubectl -k does.
func (r *runner) kustomize(t *testing.T, dir string) {
	p := filepath.Join(r.work, dir)
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), p)
	if err != nil {
		r.errorf(t, "kustomize build %s: %v", dir, err)
		return
	}
	out, err := m.AsYaml()
	if err != nil {
		r.errorf(t, "kustomize build %s: %v", dir, err)
		return
	}
	r.addObjects(t, string(out))
}

// addObjects records what a render produced.
func (r *runner) addObjects(t *testing.T, multi string) {
	for _, doc := range strings.Split(multi, "\n---") {
		var o struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
			Spec     struct {
				Template struct {
					Metadata struct{ Labels map[string]string }
				}
			}
			Data map[string]string
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			r.errorf(t, "rendered YAML does not parse: %v", err)
			return
		}
		if o.Kind == "" {
			continue
		}
		r.objects = append(r.objects, obj{Kind: o.Kind, Namespace: o.Metadata.Namespace, Name: o.Metadata.Name,
			PodLabels: o.Spec.Template.Metadata.Labels, Data: o.Data})
	}
}

// find returns the rendered object, or nil.
func (r *runner) find(kind, ns, name string) *obj {
	for i := range r.objects {
		o := &r.objects[i]
		if o.Kind == kind && o.Namespace == ns && o.Name == name {
			return o
		}
	}
	return nil
}

// expect checks, once every block has rendered, that the docs name an
// object the chart or an overlay creates.
func (r *runner) expect(kind, ns, name string) {
	where := r.where
	r.later = append(r.later, func(t *testing.T) {
		if r.find(kind, ns, name) == nil {
			t.Errorf("%s: no %s %s/%s in what the docs install", where, kind, ns, name)
		}
	})
}

func (r *runner) deferred(t *testing.T) {
	for _, f := range r.later {
		f(t)
	}
}

// kubectlFlags are the flags the docs may use, and whether they take a value.
var kubectlFlags = map[string]bool{
	"-n": true, "--namespace": true, "-l": true, "--selector": true, "-o": true, "--output": true,
	"-f": true, "--filename": true, "-k": true, "--kustomize": true, "--timeout": true, "--cascade": true,
	"--since": true, "--tail": true, "-c": true, "--container": true, "--for": true,
	"--overwrite": false, "--previous": false, "-A": false, "--all-namespaces": false, "-w": false,
}

var kinds = map[string]string{"daemonset": "DaemonSet", "ds": "DaemonSet", "configmap": "ConfigMap", "cm": "ConfigMap"}

func (r *runner) kubectl(t *testing.T, args []string, redirect string) {
	if len(args) > 0 && args[0] == "mesh-cni" {
		// The plugin: kubectl runs kubectl-mesh_cni with the rest.
		r.meshCNICtl(t, r.plugin, append([]string{"kubectl mesh-cni"}, args[1:]...))
		return
	}
	flags := map[string]string{}
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		takes, known := kubectlFlags[name]
		switch {
		case !strings.HasPrefix(a, "-"):
			pos = append(pos, a)
		case !known:
			r.errorf(t, "kubectl: flag %s is not one the docs test knows; add it to docs/runner_test.go", name)
			return
		case takes && !hasVal:
			if i+1 == len(args) {
				r.errorf(t, "kubectl: %s needs a value", a)
				return
			}
			flags[name], i = args[i+1], i+1
		default:
			flags[name] = val
		}
	}
	ns := flags["-n"] + flags["--namespace"]
	if ns == "" {
		ns = "default"
	}
	if len(pos) == 0 {
		r.errorf(t, "kubectl without a verb")
		return
	}
	ref := func(s string) {
		kind, name, ok := strings.Cut(s, "/")
		if !ok || kinds[kind] == "" {
			r.errorf(t, "kubectl: %q is not a kind/name the docs test knows", s)
			return
		}
		r.expect(kinds[kind], ns, name)
	}
	if redirect != "" && pos[0] != "get" {
		r.errorf(t, "kubectl %s output redirected", pos[0])
	}
	switch verb := pos[0]; verb {
	case "create":
		if len(pos) != 3 || pos[1] != "namespace" {
			r.errorf(t, "kubectl create: only \"create namespace NAME\"")
		}
	case "label":
		if len(pos) < 4 || pos[1] != "namespace" {
			r.errorf(t, "kubectl label: only \"label namespace NAME KEY=VALUE\"")
			return
		}
		for _, kv := range pos[3:] {
			if k, v, _ := strings.Cut(kv, "="); k == "pod-security.kubernetes.io/enforce" && v != "privileged" {
				r.errorf(t, "the agent needs %s=privileged, not %s", k, v)
			}
		}
	case "apply", "delete":
		switch {
		case flags["-k"] != "":
			r.kustomize(t, flags["-k"])
		case flags["-f"] == "-":
			if !r.pipedIn {
				r.errorf(t, "kubectl %s -f - without a pipe", verb)
			}
		case flags["-f"] != "":
			if _, err := os.Stat(filepath.Join(r.work, flags["-f"])); err != nil {
				r.errorf(t, "kubectl %s -f: %v", verb, err)
			}
		case verb == "delete" && len(pos) == 3:
			ref(pos[1] + "/" + pos[2])
		default:
			r.errorf(t, "kubectl %s: no check for %q", verb, args)
		}
	case "rollout":
		if len(pos) != 3 || pos[1] != "status" {
			r.errorf(t, "kubectl rollout: only \"rollout status KIND/NAME\"")
			return
		}
		ref(pos[2])
	case "logs":
		if len(pos) != 2 {
			r.errorf(t, "kubectl logs: want one pod or KIND/NAME")
		} else if strings.Contains(pos[1], "/") {
			ref(pos[1])
		}
	case "describe":
		if len(pos) != 3 {
			r.errorf(t, "kubectl describe: want KIND NAME")
		} else if kinds[pos[1]] != "" {
			ref(pos[1] + "/" + pos[2])
		}
	case "port-forward":
		if len(pos) != 3 {
			r.errorf(t, "kubectl port-forward: want KIND/NAME PORT:PORT")
			return
		}
		ref(pos[1])
		if p, _, _ := strings.Cut(pos[2], ":"); p != r.metricsPort && p != r.probePort {
			r.errorf(t, "port %s is neither the metrics port %s nor the probe port %s", p, r.metricsPort, r.probePort)
		}
	case "get":
		r.kubectlGet(t, pos, flags, ns, redirect)
	default:
		r.errorf(t, "kubectl %s: no check for it", verb)
	}
}

func (r *runner) kubectlGet(t *testing.T, pos []string, flags map[string]string, ns, redirect string) {
	out := flags["-o"] + flags["--output"]
	if len(pos) < 2 {
		r.errorf(t, "kubectl get without a kind")
		return
	}
	switch {
	case len(pos) == 3 && pos[1] == "node":
		if !strings.Contains(out, strings.ReplaceAll(check.StatusAnnotation, ".", `\.`)) {
			r.errorf(t, "kubectl get node: expected a jsonpath on the %s annotation", check.StatusAnnotation)
		}
	case pos[1] == "pods" && flags["-l"] != "":
		sel := flags["-l"]
		where := r.where
		r.later = append(r.later, func(t *testing.T) {
			k, v, _ := strings.Cut(sel, "=")
			for _, o := range r.objects {
				if o.Kind == "DaemonSet" && o.Namespace == ns && o.PodLabels[k] == v {
					return
				}
			}
			t.Errorf("%s: -l %s matches no agent pod in namespace %s", where, sel, ns)
		})
	case len(pos) == 3 && pos[1] == "pod" && out == "yaml" && redirect != "":
		r.write(t, redirect, examplePod)
	case len(pos) == 3 && pos[1] == "configmap" && out == `jsonpath={.data.plugin\.json}` && redirect != "":
		r.expect("ConfigMap", ns, pos[2])
		o := r.find("ConfigMap", ns, pos[2])
		if o == nil || o.Data["plugin.json"] == "" {
			r.errorf(t, "no ConfigMap %s/%s with plugin.json rendered before this command", ns, pos[2])
			return
		}
		r.write(t, redirect, o.Data["plugin.json"])
	default:
		r.errorf(t, "kubectl get %q: no check for it", pos[1:])
	}
}

// write stands in for a cluster's answer: the file a command redirects to.
func (r *runner) write(t *testing.T, name, content string) {
	if err := os.WriteFile(filepath.Join(r.work, name), []byte(content), 0o644); err != nil {
		r.errorf(t, "%v", err)
	}
}

// examplePod is what "kubectl get pod -o yaml" gives for a Linkerd pod
// injected in CNI mode.
const examplePod = `apiVersion: v1
kind: Pod
metadata:
  name: web-0
  namespace: shop
  annotations:
    linkerd.io/inject: enabled
    linkerd.io/proxy-version: stable-2.14.10
spec:
  initContainers:
    - name: linkerd-network-validator
      image: cr.l5d.io/linkerd/proxy:stable-2.14.10
  containers:
    - name: app
      image: shop/web:1.0
    - name: linkerd-proxy
      image: cr.l5d.io/linkerd/proxy:stable-2.14.10
      securityContext:
        runAsUser: 2102
status:
  podIPs:
    - ip: 10.244.1.7
`

func (r *runner) meshCNICtl(t *testing.T, bin string, argv []string) {
	if len(argv) < 2 {
		r.errorf(t, "%s without a command", argv[0])
		return
	}
	switch argv[1] {
	case "explain":
		if pod := explainPod(argv[2:]); pod != "" {
			r.ensureLivePod(t)
			if slices.Contains(argv, "--check") {
				r.explainCheck(t, bin, append(argv, "--kubeconfig", r.kubeconfig))
				return
			}
			r.explain(t, bin, append(argv, "--kubeconfig", r.kubeconfig))
			return
		}
		r.explain(t, bin, argv)
	case "check":
		out, errs, code := r.run(t, bin, append(argv[1:], "--kubeconfig", r.kubeconfig)...)
		reached := strings.Contains(out, "✓ API server reachable")
		var rep check.Report
		if json.Unmarshal([]byte(out), &rep) == nil && len(rep.Checks) > 0 {
			reached = rep.Checks[0].Name == "API server reachable" && rep.Checks[0].Status == check.OK
		}
		if code != 0 && code != 1 || !reached {
			r.errorf(t, "%s check exited %d against the test API server:\n%s%s", argv[0], code, out, errs)
		}
	case "version":
		out, errs, code := r.run(t, bin, append(argv[1:], "--kubeconfig", r.kubeconfig)...)
		if code != 0 || !strings.Contains(out, " "+r.version+" ") {
			r.errorf(t, "%s version exited %d:\n%s%s", argv[0], code, out, errs)
		}
	case "completion":
		if out, errs, code := r.run(t, bin, argv[1:]...); code != 0 || out == "" {
			r.errorf(t, "%s completion exited %d:\n%s", argv[0], code, errs)
		}
	default:
		r.errorf(t, "%s %s: no check for it", argv[0], argv[1])
	}
}

// explainPod is the pod argument of explain's args ("" for none).
func explainPod(args []string) string {
	valued := map[string]bool{"-n": true, "--namespace": true, "--config": true, "--pod": true, "--profile": true, "--mesh-config": true,
		"--annotation": true, "--label": true, "--family": true, "--format": true, "-o": true, "--output": true, "--agent-namespace": true, "--timeout": true}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case valued[a]:
			i++
		case !strings.HasPrefix(a, "-"):
			return a
		}
	}
	return ""
}

// ensureLivePod stands in for the cluster the docs explain a pod of: the
// example pod shop/web-0 on node worker-3, whose agent published its
// status with the chain entry.
func (r *runner) ensureLivePod(t *testing.T) {
	if r.livePod {
		return
	}
	r.livePod = true
	ctx := context.Background()
	c := r.env.Client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	r.env.Node(t, "worker-3")
	entry, err := config.Load([]byte(`{"type":"mesh-cni"}`), config.HostPaths{Kubeconfig: node.DefaultKubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	json.Compact(&compact, entry)
	st, _ := json.Marshal(check.AgentStatus{Marker: node.Marker{Version: r.version}, Ready: true, Entry: compact.Bytes()})
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{check.StatusAnnotation: string(st)}}})
	if _, err := c.CoreV1().Nodes().Patch(ctx, "worker-3", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal([]byte(examplePod), &pod); err != nil {
		t.Fatal(err)
	}
	pod.Spec.NodeName = "worker-3"
	if _, err := c.CoreV1().Pods("shop").Create(ctx, &pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (r *runner) explain(t *testing.T, bin string, argv []string) {
	if len(argv) < 2 || argv[1] != "explain" {
		r.errorf(t, "%s: only the explain subcommand is expected in the docs", argv[0])
		return
	}
	out, errs, code := r.run(t, bin, argv[1:]...)
	if code != 0 || !strings.Contains(out, "decision: ") && !strings.Contains(out, `"decision"`) {
		r.errorf(t, "%s exited %d:\n%s%s", strings.Join(argv, " "), code, out, errs)
	}
}

// explainCheck runs explain --check as the docs show it. No agent runs
// against the test API server (no kubelet, no node), so the command is
// expected to explain the pod and then stop where it looks for the agent
// pod of worker-3, saying so; cmd/mesh-cnictl/podcheck_test.go runs the whole path
// with a real agent endpoint, netns and pods/proxy.
func (r *runner) explainCheck(t *testing.T, bin string, argv []string) {
	out, errs, code := r.run(t, bin, argv[1:]...)
	if code != 1 || !strings.Contains(errs, "no running mesh-cni agent pod") || !strings.Contains(errs, "worker-3") ||
		!strings.Contains(out, "decision: ") && !slices.Contains(argv, "-o") {
		r.errorf(t, "%s exited %d, want 1 at the agent lookup:\n%s%s", strings.Join(argv, " "), code, out, errs)
	}
}

// podExample runs a pod manifest the docs show through mesh-cnictl explain.
func (r *runner) podExample(t *testing.T, b doctest.Block) {
	r.where = fmt.Sprintf("%s:%d", b.File, b.Line)
	r.ran++
	r.work = t.TempDir()
	r.write(t, "pod.yaml", b.Body)
	r.explain(t, r.ctl, []string{"mesh-cnictl", "explain", "--pod", "pod.yaml"})
}

func (r *runner) make(t *testing.T, argv []string) {
	mk, err := os.ReadFile(filepath.Join(r.root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range argv[1:] {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).Match(mk) {
			r.errorf(t, "make %s: no such target in the Makefile", target)
		}
	}
}

// nodePaths checks paths on a node against the host paths mesh-cni uses.
func (r *runner) nodePaths(t *testing.T, args []string) {
	known := map[string]bool{
		node.DefaultReadyMarker: true, node.DefaultKubeconfig: true, node.DefaultAgentSocket: true,
		node.DefaultReportSocket: true, node.DefaultBinDir + "/" + node.PluginType: true,
		node.DefaultBinDir + "/" + node.HelperBinary: true,
	}
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "-"):
		case known[a]:
		case filepath.Dir(a) == node.DefaultConfDir && (strings.HasSuffix(a, ".conflist") || strings.HasSuffix(a, ".conf")):
		default:
			r.errorf(t, "%s is not a host path mesh-cni uses (internal/node)", a)
		}
	}
}

func (r *runner) journalctl(t *testing.T, args []string) {
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-u":
			if i+1 == len(args) || !map[string]bool{"containerd": true, "crio": true, "kubelet": true}[args[i+1]] {
				r.errorf(t, "journalctl -u: the plugin logs through containerd or crio")
			}
			i++
		case "--since":
			i++
		default:
			r.errorf(t, "journalctl: no check for %q", args[i])
		}
	}
}

func (r *runner) curl(t *testing.T, args []string) {
	if len(args) != 2 || args[0] != "-s" {
		r.errorf(t, "curl: only \"curl -s localhost:PORT/PATH\"")
		return
	}
	ok := map[string]bool{
		"localhost:" + r.metricsPort + "/metrics": true,
		"localhost:" + r.probePort + "/healthz":   true,
		"localhost:" + r.probePort + "/readyz":    true,
	}
	if !ok[args[1]] {
		r.errorf(t, "curl %s: the agent serves /metrics on %s and /healthz, /readyz on %s", args[1], r.metricsPort, r.probePort)
	}
}
