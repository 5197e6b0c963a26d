package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/mesh-cni/mesh-cni/internal/agent/kubeconfig"
	"github.com/mesh-cni/mesh-cni/internal/agent/metrics"
)

func (a *Agent) writeKubeconfig() {
	err := a.o.KubeOptsErr
	wrote := false
	if err == nil {
		wrote, err = kubeconfig.Write(a.o.Kubeconfig, a.o.KubeOpts)
	}
	failed := err
	if err != nil {
		err = fmt.Errorf("kubeconfig: %w", err)
		failed = err
		// A refresh that fails (a token being rotated, an unreadable CA)
		// leaves the last good kubeconfig in place: the node stays ready
		// on it rather than flapping, and the failure is logged.
		if usableKubeconfig(a.o.Kubeconfig) {
			err = nil
		}
	}
	a.mu.Lock()
	changed := (err == nil) != (a.kubeErr == nil) || !a.kubeDone
	warn := failed != nil && (a.lastKubeFail == "" || a.lastKubeFail != failed.Error())
	if failed != nil {
		a.lastKubeFail = failed.Error()
	} else {
		a.lastKubeFail = ""
	}
	a.kubeErr, a.kubeDone = err, true
	a.mu.Unlock()
	switch {
	case warn:
		a.o.Log.Warn("cannot write the plugin's kubeconfig", "err", failed, "keeping_previous", err == nil)
		metrics.Installs.WithLabelValues("kubeconfig_failure").Inc()
	case wrote:
		a.o.Log.Info("wrote the plugin's kubeconfig", "path", a.o.Kubeconfig)
	}
	if changed || wrote {
		a.update()
	}
}

// usableKubeconfig: the file exists and holds a server and a token.
func usableKubeconfig(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var c kubeconfig.Config
	if json.Unmarshal(b, &c) != nil || len(c.Clusters) == 0 || len(c.Users) == 0 {
		return false
	}
	return c.Clusters[0].Cluster.Server != "" && c.Users[0].User.Token != ""
}

// watchToken rewrites the kubeconfig when kubelet rotates the projected
// token (an atomic symlink swap in the token's dir), and every TokenResync
// in case an event was missed.
func (a *Agent) watchToken(ctx context.Context) {
	var events chan fsnotify.Event
	if a.o.KubeOpts.TokenPath != "" {
		if w, err := fsnotify.NewWatcher(); err == nil {
			defer w.Close()
			if err := w.Add(filepath.Dir(a.o.KubeOpts.TokenPath)); err == nil {
				events = w.Events
			} else {
				a.o.Log.Warn("cannot watch the token dir; re-reading it periodically", "err", err)
			}
		}
	}
	t := time.NewTicker(a.o.TokenResync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
			// Settle: the writer swaps several links in a row.
			time.Sleep(50 * time.Millisecond)
			drainEvents(events)
		case <-t.C:
		}
		a.writeKubeconfig()
	}
}

func drainEvents(ch chan fsnotify.Event) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
