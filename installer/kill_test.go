package main

import (
	"bytes"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// TestKill9RealAgent kills the real agent binary with SIGKILL at random
// moments while it converts and chains a .conf primary that keeps being
// rewritten: after every kill the conf dir holds only configs the runtime
// loads, and the primary's network is always there.
func TestKill9RealAgent(t *testing.T) {
	bin := buildAgent(t)
	root := t.TempDir()
	conf := filepath.Join(root, "conf")
	for _, d := range []string{"bin", "conf", "img"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	orig, err := os.ReadFile("../internal/agent/install/testdata/conflists/crio-legacy-bridge.conf")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(conf, "10-crio-bridge.conf"), orig, 0o644)
	primaryPlugins(t, filepath.Join(root, "bin"), orig)
	os.WriteFile(filepath.Join(root, "img/mesh-cni"), []byte("plugin"), 0o755)
	os.WriteFile(filepath.Join(root, "img/mesh-cni-podget"), []byte("podget"), 0o755)
	os.WriteFile(filepath.Join(root, "img/plugin.json"), []byte(`{"type":"mesh-cni"}`), 0o644)
	var cmd *exec.Cmd
	start := func() {
		cmd = exec.Command(bin, "--cni-bin-dir", filepath.Join(root, "bin"), "--cni-conf-dir", conf,
			"--state-dir", filepath.Join(root, "state"), "--run-dir", filepath.Join(root, "run"),
			"--plugin-config", filepath.Join(root, "img/plugin.json"), "--plugin-binary", filepath.Join(root, "img/mesh-cni"), "--podget-binary", filepath.Join(root, "img/mesh-cni-podget"),
			"--probe-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--log-level=error")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // not in a pod: installs without the API
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	kill := func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
	chainedNow := func() bool {
		ents, _ := os.ReadDir(conf)
		for _, e := range ents {
			data, _ := os.ReadFile(filepath.Join(conf, e.Name()))
			if bytes.Contains(data, []byte(`"mesh-cni"`)) {
				return true
			}
		}
		return false
	}
	reset := func() {
		os.RemoveAll(conf)
		os.RemoveAll(filepath.Join(root, "state"))
		os.MkdirAll(conf, 0o755)
		os.WriteFile(filepath.Join(conf, "10-crio-bridge.conf"), orig, 0o644)
	}
	// How long start-up, conversion and chaining take here (a slow or busy
	// machine needs several times longer): the kills sweep twice that.
	window := testenv.KillWindow(t, 5, start, chainedNow, func() { kill(); reset() })
	t.Logf("kill moments swept over %v", window)

	rng := rand.New(rand.NewSource(2))
	chained := 0
	const kills = 100
	for i := 0; i < kills; i++ {
		start()
		if i%4 == 0 {
			// The primary writes its .conf again (atomically).
			tmp := filepath.Join(conf, ".crio-tmp")
			os.WriteFile(tmp, orig, 0o644)
			os.Rename(tmp, filepath.Join(conf, "10-crio-bridge.conf"))
		}
		// Sweep the kill moment over the window, jittered.
		step := window / 20
		time.Sleep(time.Duration(i%20)*step + time.Duration(rng.Int63n(int64(step)+1)))
		kill()

		ents, _ := os.ReadDir(conf)
		networks := 0
		for _, e := range ents {
			name := e.Name()
			if strings.HasPrefix(name, ".") || e.IsDir() {
				continue
			}
			p := filepath.Join(conf, name)
			data, _ := os.ReadFile(p)
			var l *libcni.NetworkConfigList
			var err error
			if strings.HasSuffix(name, ".conflist") {
				l, err = libcni.ConfListFromBytes(data)
			} else {
				var c *libcni.NetworkConfig
				if c, err = libcni.ConfFromBytes(data); err == nil { //nolint:staticcheck // primaries still write .conf files; only this reads them
					l, err = libcni.ConfListFromConf(c) //nolint:staticcheck // primaries still write .conf files; only this reads them
				}
			}
			if err != nil {
				t.Fatalf("after kill %d: %s does not load (%d bytes): %v", i, name, len(data), err)
			}
			if l.Plugins[0].Network.Type == "bridge" {
				networks++
			}
			if bytes.Contains(data, []byte(`"mesh-cni"`)) {
				chained++
			}
		}
		if networks == 0 {
			t.Fatalf("after kill %d: the primary's network is gone", i)
		}
	}
	if chained == 0 {
		t.Fatal("no kill came after the agent's write: the kills did not exercise it")
	}
	t.Logf("%d kills over %v, chained config seen after %d", kills, window, chained)
}
