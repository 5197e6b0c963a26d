package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// BenchmarkAgent runs the real agent binary on temp dirs, rewrites the
// primary config 1000 times the way a CNI daemon does (temp file +
// rename), and measures how long each time until our entry is back; then
// the agent's resident memory at steady state. Run with -benchtime=1x
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
	orig, err := os.ReadFile("../pkg/install/testdata/conflists/calico-manifest-portmap-bandwidth.conflist")
	if err != nil {
		b.Fatal(err)
	}
	primary := filepath.Join(dirs["conf"], "10-calico.conflist")
	os.WriteFile(primary, orig, 0o644)
	os.WriteFile(filepath.Join(dirs["sa"], "token"), []byte("token"), 0o600)
	os.WriteFile(filepath.Join(dirs["img"], "mesh-cni"), bytes.Repeat([]byte("x"), 4<<20), 0o755)
	os.WriteFile(filepath.Join(dirs["img"], "plugin.json"), []byte(`{"type":"mesh-cni","backend":"nftables"}`), 0o644)
	probe := freeAddr(b)
	cmd := exec.Command(bin,
		"--cni-bin-dir", dirs["bin"], "--cni-conf-dir", dirs["conf"], "--state-dir", dirs["state"],
		"--run-dir", dirs["run"], "--plugin-config", filepath.Join(dirs["img"], "plugin.json"),
		"--plugin-binary", filepath.Join(dirs["img"], "mesh-cni"), "--token-path", filepath.Join(dirs["sa"], "token"),
		"--ca-path", filepath.Join(dirs["sa"], "token"), "--probe-addr", probe, "--metrics-addr", freeAddr(b),
		"--repair=false", "--uninstall-mode=never", "--log-level=warn")
	// No API server is reachable; the agent installs without one.
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=1")
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
	rss, hwm := procMem(b, cmd.Process.Pid)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	b.ReportMetric(float64(p(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(rss/1024, "rss-MiB")
	b.ReportMetric(hwm/1024, "peak-rss-MiB")
	fmt.Printf("re-chain after %d rewrites: p50 %v, p99 %v, max %v; RSS %.1f MiB (peak %.1f MiB)\n",
		n, p(0.50), p(0.99), lat[len(lat)-1], rss/1024, hwm/1024)
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
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := http.Get("http://" + addr + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("agent never ready:\n%s", logs.String())
}

// procMem returns VmRSS and VmHWM in KiB.
func procMem(b *testing.B, pid int) (rss, hwm float64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(fs[1], 64)
		switch fs[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		}
	}
	return rss, hwm
}
