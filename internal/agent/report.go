package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/agent/metrics"
	"github.com/mesh-cni/mesh-cni/internal/node"
)

// ServeReports reads the plugin's node.Event datagrams from a unixgram
// socket at path and feeds the metrics until ctx ends. The plugin sends
// with a short deadline and drops the event when nobody listens, so this
// is never on its critical path.
func ServeReports(ctx context.Context, path string, log *slog.Logger) error {
	return ServeReportsTo(ctx, path, log, nil)
}

// ServeReportsTo is ServeReports that also hands each valid report to on
// (when not nil), after the metrics have counted it.
func ServeReportsTo(ctx context.Context, path string, log *slog.Logger, on func(node.Event)) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("report socket dir: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("report socket %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("remove stale report socket: %w", err)
		}
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("listen on report socket: %w", err)
	}
	// Only root (the runtime running the plugin) may write.
	if err := os.Chmod(path, 0o600); err != nil {
		conn.Close()
		return fmt.Errorf("chmod report socket: %w", err)
	}
	go func() {
		<-ctx.Done()
		conn.Close()
	}()
	buf := make([]byte, 64*1024)
	oob := make([]byte, unix.CmsgSpace(maxPassedFDs*4))
	for {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil {
			if ctx.Err() != nil {
				return nil //nolint:nilerr // the read failed because we are stopping
			}
			return fmt.Errorf("read report socket: %w", err)
		}
		hold(passedFDs(oob[:oobn]))
		var ev node.Event
		if err := json.Unmarshal(buf[:n], &ev); err != nil || ev.Command == "" || ev.Decision == "" {
			metrics.ReportsDropped.Inc()
			log.Debug("dropped report datagram", "err", err, "bytes", n)
			continue
		}
		Observe(ev)
		if on != nil {
			on(ev)
		}
	}
}

// knownCommands and knownDecisions bound the label values, so a buggy or
// hostile sender cannot blow up the series count.
var (
	knownCommands  = map[string]bool{"ADD": true, "DEL": true, "CHECK": true, "STATUS": true, "GC": true}
	knownDecisions = map[string]bool{"meshed": true, "skipped": true, "failed": true, "deleted": true, "ok": true}
	knownBackends  = map[string]bool{"nftables": true, "iptables-nft": true, "iptables-legacy": true} // internal/backend names
)

func bounded(s string, max int) string {
	if len(s) > max {
		return s[:max]
	}
	return s
}

// Observe records one plugin event.
func Observe(ev node.Event) {
	cmd, dec := ev.Command, ev.Decision
	if !knownCommands[cmd] {
		cmd = "other"
	}
	if !knownDecisions[dec] {
		dec = "other"
	}
	if ev.Seconds >= 0 && (cmd == "ADD" || cmd == "DEL" || cmd == "CHECK") {
		metrics.PluginDuration.WithLabelValues(cmd, dec).Observe(ev.Seconds)
	}
	metrics.PluginDecisions.WithLabelValues(cmd, dec, bounded(ev.Reason, 64), bounded(ev.Mesh, 32)).Inc()
	if knownBackends[ev.Fallback] {
		metrics.BackendFallbacks.WithLabelValues(ev.Fallback).Inc()
	}
}
