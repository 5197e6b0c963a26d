package check

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/ciliumcfg"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

const ciliumTestdata = "testdata/cilium-config"

// Settings each rendered cilium-config breaks, by ciliumcfg.Cases name.
var ciliumWant = map[string][]string{
	"defaults":                  {"cni-exclusive=true"},
	"exclusive-false":           nil,
	"custom-conf":               nil,
	"socketlb":                  {"bpf-lb-sock=true without bpf-lb-sock-hostns-only=true"},
	"socketlb-hostns":           nil,
	"kpr":                       {"kube-proxy-replacement without bpf-lb-sock-hostns-only=true"},
	"kpr-hostns":                nil,
	"kpr-hostns-bpf-masquerade": nil,
	"all-bad": {"cni-exclusive=true", "bpf-lb-sock=true without bpf-lb-sock-hostns-only=true",
		"kube-proxy-replacement without bpf-lb-sock-hostns-only=true"},
	"e2e":           nil,
	"e2e-exclusive": {"cni-exclusive=true"},
}

// readCiliumConfig reads one rendered ConfigMap of the testdata.
func readCiliumConfig(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ciliumTestdata, name+".yaml"))
	if err != nil {
		t.Fatalf("%v (run go generate ./internal/ctl/check)", err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if cm.Kind != "ConfigMap" || cm.Name != "cilium-config" || len(cm.Data) < 50 {
		t.Fatalf("%s: not the chart's cilium-config: %s %s with %d keys", name, cm.Kind, cm.Name, len(cm.Data))
	}
	return &cm
}

// The rules against cilium-config as Cilium's chart renders it: each
// breaking value alone, the values Cilium's Istio guide asks for, and all
// at once.
func TestCiliumChartConfigs(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(ciliumTestdata, "*.yaml"))
	if len(files) != len(ciliumcfg.Cases) {
		t.Errorf("%d files in %s, %d cases: run go generate ./internal/ctl/check", len(files), ciliumTestdata, len(ciliumcfg.Cases))
	}
	for _, c := range ciliumcfg.Cases {
		t.Run(c.Name, func(t *testing.T) {
			want, known := ciliumWant[c.Name]
			if !known {
				t.Fatalf("no expectation for case %s", c.Name)
			}
			problems, fixes, notes := ciliumFindings(readCiliumConfig(t, c.Name).Data)
			var got []string
			for _, p := range problems {
				setting, _, _ := strings.Cut(p, ": ")
				got = append(got, setting)
				if !strings.Contains(p, "(Helm: --set ") {
					t.Errorf("no Helm fix in %q", p)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("settings reported %q, want %q", got, want)
			}
			if len(want) > 0 && len(fixes) == 0 || len(want) == 0 && len(fixes) > 0 {
				t.Errorf("fixes %q for problems %q", fixes, got)
			}
			masq := slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, "enable-bpf-masquerade=true") })
			if masq != (c.Name == "kpr-hostns-bpf-masquerade") {
				t.Errorf("notes %q", notes)
			}
		})
	}
}

// Booleans as the agent reads them (strconv.ParseBool), not only "true".
func TestCiliumBool(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{{"true", true}, {"True", true}, {"1", true}, {" true\n", true},
		{"false", false}, {"", false}, {"yes", false}, {"enabled", false}} {
		if got := ciliumBool(map[string]string{"k": c.v}, "k"); got != c.want {
			t.Errorf("%q: %v, want %v", c.v, got, c.want)
		}
	}
	if p, _, _ := ciliumFindings(map[string]string{"kube-proxy-replacement": "strict"}); len(p) != 1 {
		t.Errorf("kube-proxy-replacement=strict (before Cilium 1.16): %q", p)
	}
}

// The testdata is what the chart of the pinned Cilium renders today.
func TestCiliumConfigsCurrent(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	dir, err := ciliumcfg.ChartDir(root, false)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("%v: not in the module cache (hack/build-cilium.sh or go generate ./internal/ctl/check fetch it)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	v, err := ciliumcfg.Version(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ciliumcfg.Cases {
		got, err := ciliumcfg.Render(root, dir, v, c)
		if err != nil {
			t.Fatal(err)
		}
		old, err := os.ReadFile(filepath.Join(ciliumTestdata, c.Name+".yaml"))
		if err != nil || string(old) != got {
			t.Errorf("%s/%s.yaml is out of date: run go generate ./internal/ctl/check", ciliumTestdata, c.Name)
		}
	}
}

// The check against a real API server, with the chart's ConfigMaps.
func TestCiliumSettings(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	r := runOne(t, env, CiliumSettings, Options{})
	wantStatus(t, r, OK)
	if r.Message != "Cilium not found" {
		t.Errorf("message %q", r.Message)
	}
	// Cilium's own namespace, as the cilium CLI installs it.
	_, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cilium"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, ns := range ciliumNamespaces {
		cms := env.Client.CoreV1().ConfigMaps(ns)
		put := func(name string) {
			t.Helper()
			cm := readCiliumConfig(t, name)
			cm.Namespace = ns
			_, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
			if err != nil {
				_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		put("all-bad")
		r = runOne(t, env, CiliumSettings, Options{})
		wantStatus(t, r, Fail)
		if r.Message != ns+"/cilium-config: 3 setting(s) break a sidecar mesh" || len(r.Details) != 3 {
			t.Errorf("message %q, details %q", r.Message, r.Details)
		}
		want := "helm upgrade cilium cilium/cilium -n " + ns + " --reuse-values --set cni.exclusive=false --set socketLB.hostNamespaceOnly=true,"
		if !strings.HasPrefix(r.Hint, want) || !strings.Contains(r.Hint, "rollout restart daemonset/cilium") {
			t.Errorf("hint %q, want it to start with %q and restart the agents", r.Hint, want)
		}
		put("kpr-hostns-bpf-masquerade")
		r = runOne(t, env, CiliumSettings, Options{})
		wantStatus(t, r, OK)
		if len(r.Details) != 1 || !strings.HasPrefix(r.Details[0], "enable-bpf-masquerade=true") {
			t.Errorf("details %q", r.Details)
		}
		put("defaults")
		wantStatus(t, runOne(t, env, CiliumSettings, Options{}), Fail)
		if err := cms.Delete(ctx, "cilium-config", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
