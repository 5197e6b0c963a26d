package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// BenchmarkAgent runs the real agent binary on temp dirs, against a real
// kube-apiserver with the chart's RBAC and 100 pods on its node (so the pod
// cache and repair controller hold real objects), rewrites the primary
// config 1000 times the way a CNI daemon does (temp file + rename), and
// measures how long each time until our entry is back; then the agent's
// resident memory at steady state. Run with -benchtime=1x
// (make bench-agent); MESH_CNI_AGENT_BIN names the binary (else it is
// built).
func BenchmarkAgent(b *testing.B) {
	bin := os.Getenv("MESH_CNI_AGENT_BIN")
	root := b.TempDir()
	if bin == "" {
		bin = filepath.Join(root, "mesh-cni-agent")
		out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
		if err != nil {
			b.Fatalf("build: %v\n%s", err, out)
		}
	}
	dirs := map[string]string{}
	for _, d := range []string{"bin", "conf", "state", "run", "sa", "img"} {
		dirs[d] = filepath.Join(root, d)
		os.MkdirAll(dirs[d], 0o755)
	}
	orig, err := os.ReadFile("../internal/agent/install/testdata/conflists/calico-manifest-portmap-bandwidth.conflist")
	if err != nil {
		b.Fatal(err)
	}
	primary := filepath.Join(dirs["conf"], "10-calico.conflist")
	os.WriteFile(primary, orig, 0o644)
	primaryPlugins(b, dirs["bin"], orig)
	os.WriteFile(filepath.Join(dirs["img"], "mesh-cni"), bytes.Repeat([]byte("x"), 4<<20), 0o755)
	os.WriteFile(filepath.Join(dirs["img"], "mesh-cni-podget"), bytes.Repeat([]byte("y"), 4<<20), 0o755)
	os.WriteFile(filepath.Join(dirs["img"], "plugin.json"), []byte(`{"type":"mesh-cni","backend":"nftables"}`), 0o644)
	env := testenv.Start(b)
	ns, _, token := agentClient(b, env)
	nodeName := "bench-" + ns
	env.Node(b, nodeName)
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i), Namespace: ns,
				Annotations: map[string]string{"linkerd.io/inject": "enabled"}, Labels: map[string]string{"app": "bench"}},
			Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
		}
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dirs["sa"], "token"), []byte(token), 0o600)
	os.WriteFile(filepath.Join(dirs["sa"], "ca.crt"), env.CAData, 0o600)
	u, _ := url.Parse(env.Host)
	probe := freeAddr(b)
	cmd := exec.Command(bin,
		"--cni-bin-dir", dirs["bin"], "--cni-conf-dir", dirs["conf"], "--state-dir", dirs["state"],
		"--run-dir", dirs["run"], "--plugin-config", filepath.Join(dirs["img"], "plugin.json"),
		"--plugin-binary", filepath.Join(dirs["img"], "mesh-cni"), "--podget-binary", filepath.Join(dirs["img"], "mesh-cni-podget"), "--token-path", filepath.Join(dirs["sa"], "token"),
		"--probe-addr", probe, "--metrics-addr", freeAddr(b), "--uninstall-mode=never", "--log-level=warn")
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST="+u.Hostname(), "KUBERNETES_SERVICE_PORT="+u.Port(),
		"NODE_NAME="+nodeName, "POD_NAMESPACE="+ns)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	waitReady(b, probe, &logs)

	w, err := fsnotify.NewWatcher()
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	w.Add(dirs["conf"])
	const n = 1000
	lat := make([]time.Duration, 0, n)
	tmp := filepath.Join(dirs["conf"], ".primary-tmp")
	b.ResetTimer()
	for i := 0; i < n; i++ {
		os.WriteFile(tmp, orig, 0o644)
		start := time.Now()
		if err := os.Rename(tmp, primary); err != nil {
			b.Fatal(err)
		}
		for {
			cur, err := os.ReadFile(primary)
			if err != nil {
				b.Fatal(err)
			}
			if bytes.Contains(cur, []byte(`"mesh-cni"`)) {
				lat = append(lat, time.Since(start))
				break
			}
			if time.Since(start) > 5*time.Second {
				b.Fatalf("rewrite %d: not re-chained within 5s\n%s", i, logs.String())
			}
			select {
			case <-w.Events:
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	b.StopTimer()
	time.Sleep(2 * time.Second) // steady state: the storm is over
	mem := procMem(b, cmd.Process.Pid)
	rss, hwm := mem["VmRSS:"], mem["VmHWM:"]
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	b.ReportMetric(float64(p(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(rss/1024, "rss-MiB")
	b.ReportMetric(hwm/1024, "peak-rss-MiB")
	fmt.Printf("re-chain after %d rewrites: p50 %v, p99 %v, max %v; RSS %.1f MiB (anon %.1f, file %.1f; peak %.1f MiB)\n",
		n, p(0.50), p(0.99), lat[len(lat)-1], rss/1024, mem["RssAnon:"]/1024, mem["RssFile:"]/1024, hwm/1024)
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

func freeAddr(b *testing.B) string {
	l, err := netListen()
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitReady(b *testing.B, addr string, logs *bytes.Buffer) {
	err := testenv.WaitFor(testenv.Timeout(), func() error {
		r, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode != 200 {
			return fmt.Errorf("readyz %d", r.StatusCode)
		}
		return nil
	})
	if err != nil {
		b.Fatalf("agent never ready: %v\n%s", err, logs.String())
	}
}

// procMem returns the memory lines of /proc/PID/status, in KiB.
func procMem(b *testing.B, pid int) map[string]float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	out := map[string]float64{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) == 3 && fs[2] == "kB" {
			v, _ := strconv.ParseFloat(fs[1], 64)
			out[fs[0]] = v
		}
	}
	return out
}
