package install

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

const childEnv = "MESH_CNI_TEST_INSTALL_CHILD"

// TestMain lets the test binary run as the agent's install loop in a child
// process, so it can be killed with SIGKILL mid-write.
func TestMain(m *testing.M) {
	if raw := os.Getenv(childEnv); raw != "" {
		var cfg Config
		if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
			panic(err)
		}
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
		in, err := New(cfg)
		if err != nil {
			panic(err)
		}
		in.Run(context.Background(), WatchOptions{RetryDelay: 10 * time.Millisecond, Resync: 50 * time.Millisecond}, nil)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// checkConfDir fails if any config file is empty, partial or would not
// load, and reports whether our entry is in one. A listing whose files were
// all renamed away before they could be read says nothing: list again, as a
// runtime would.
func checkConfDir(dir string) (bool, error) {
	for range 100 {
		chained, found, err := checkListing(dir)
		if err != nil || found > 0 {
			return chained, err
		}
	}
	return false, fmt.Errorf("conf dir holds no config at all")
}

func checkListing(dir string) (chained bool, found int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, 0, err
	}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || !strings.Contains(".conf.conflist.json", filepath.Ext(name)) { //nolint:gocritic // is the extension one of these
			continue
		}
		p := filepath.Join(dir, name)
		data, err := os.ReadFile(p)
		if err != nil {
			if os.IsNotExist(err) {
				continue // renamed away between ReadDir and ReadFile
			}
			return false, 0, err
		}
		if _, err := parseConfig(p, data); err != nil {
			return false, 0, fmt.Errorf("%s is not a loadable config (%d bytes): %w\n%s", name, len(data), err, data)
		}
		if ours, _ := pluginsOfType(data, "mesh-cni"); len(ours) > 0 {
			chained = true
		}
		found++
	}
	return chained, found, nil
}

func TestKill9DuringWrites(t *testing.T) {
	for _, tc := range []struct{ name, fixture, file string }{
		{"conflist", "calico-manifest-portmap-bandwidth.conflist", "10-calico.conflist"},
		{"conf-conversion", "flannel-legacy-v0.9.1.conf", "10-flannel.conf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			orig := fixture(t, tc.fixture)
			e.put(t, tc.file, orig)
			cfg := e.in.cfg
			cfg.Log = nil
			raw, _ := json.Marshal(cfg)

			var cmd *exec.Cmd
			start := func() {
				cmd = exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
			}
			kill := func() {
				cmd.Process.Signal(syscall.SIGKILL)
				cmd.Wait()
			}
			// How long the child takes to start and chain here: the kills
			// sweep twice that, however slow or busy the machine is.
			window := testenv.KillWindow(t, 5, start, func() bool { return primaryChained(t, e.conf) }, func() {
				kill()
				if err := e.in.Uninstall(); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("kill moments swept over %v", window)
			// A reader that checks the dir continuously while the agent runs
			// and gets killed, as a runtime loading the config would.
			stop := make(chan struct{})
			var checks atomic.Int64
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := checkConfDir(e.conf); err != nil {
						t.Error(err)
						return
					}
					checks.Add(1)
				}
			}()
			rng := rand.New(rand.NewSource(1))
			kills, chainedAfterKill := 0, 0
			for i := 0; i < 150 && !t.Failed(); i++ {
				start()
				// The primary rewrites its own file while we work.
				if i%3 == 0 {
					writeLikePrimary(t, filepath.Join(e.conf, tc.file), orig, false)
				}
				time.Sleep(time.Duration(rng.Int63n(int64(window) + 1)))
				kill()
				kills++
				if _, err := checkConfDir(e.conf); err != nil {
					t.Fatalf("after kill %d: %v", i, err)
				}
				// Count by the file the runtime loads: after a conversion a
				// stale chained .conflist may sit behind a rewritten .conf.
				if primaryChained(t, e.conf) {
					chainedAfterKill++
				}
			}
			// The kills must have hit both before and after the write.
			if chainedAfterKill == 0 || chainedAfterKill == kills {
				t.Errorf("chained after %d of %d kills: kills did not land during the work", chainedAfterKill, kills)
			}
			close(stop)
			wg.Wait()
			// A last agent run settles everything: chained once, and
			// uninstall gives back the original.
			if _, err := e.in.Reconcile(); err != nil {
				t.Fatal(err)
			}
			p, _, err := FindPrimary(e.conf, "")
			if err != nil {
				t.Fatal(err)
			}
			loadChained(t, p)
			if err := e.in.Uninstall(); err != nil {
				t.Fatal(err)
			}
			if got := e.read(t, tc.file); string(got) != string(orig) {
				t.Errorf("not restored:\n%s", got)
			}
			t.Logf("%d kills over %v (%d after our write), %d concurrent checks", kills, window, chainedAfterKill, checks.Load())
		})
	}
}

// primaryChained reports whether the config the runtime would load carries
// our entry.
func primaryChained(t *testing.T, dir string) bool {
	t.Helper()
	// A .conf being converted is renamed away between finding and reading
	// it; a runtime then lists again, and so does this check.
	// The same goes for a listing that saw the .conf but not yet the new
	// .conflist: the .conf is then gone when read, and no listed file
	// loads. Only a dir that stays without a config fails.
	misses := 0
	for {
		p, _, err := FindPrimary(dir, "")
		if err != nil {
			if misses++; misses < 100 {
				continue
			}
			t.Fatalf("no primary config in %d listings: %v", misses, err)
		}
		data, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ours, _ := pluginsOfType(data, "mesh-cni")
		return len(ours) > 0
	}
}
