package podcache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// MaxRequestTime bounds one lookup on the server side, whatever the client's
// deadline.
const MaxRequestTime = 10 * time.Second

// Serve runs c and answers lookups on the unix socket at socketPath until
// ctx ends. A stale socket file from an earlier run is replaced; the socket
// is removed on return.
func Serve(ctx context.Context, c *Cache, socketPath string) error {
	l, err := Listen(socketPath)
	if err != nil {
		return err
	}
	go c.Run(ctx)
	return c.Serve(ctx, l)
}

// Listen opens the unix socket, replacing a leftover socket file (never
// another kind of file).
func Listen(socketPath string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(socketPath), 0o755); err != nil {
		return nil, fmt.Errorf("pod cache socket dir: %w", err)
	}
	if fi, err := os.Lstat(socketPath); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("pod cache socket %s exists and is not a socket", socketPath)
		}
		if err := os.Remove(socketPath); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", socketPath, err)
		}
	}
	l, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socketPath, err)
	}
	// The plugin runs as root on the host; nobody else needs pod specs.
	if err := os.Chmod(socketPath, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod %s: %w", socketPath, err)
	}
	return l, nil
}

// Serve answers lookups on l until ctx ends.
func (c *Cache) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("pod cache server: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	}
}

// Handler serves GET /v1/pods/{namespace}/{name}[?uid=UID].
func (c *Cache) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/pods/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), MaxRequestTime)
		defer cancel()
		pod, err := c.Get(ctx, r.PathValue("namespace"), r.PathValue("name"), r.URL.Query().Get("uid"))
		switch {
		case errors.Is(err, ErrNotFound):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		case err != nil:
			// Unknown, not absent: the plugin falls back to its own GET.
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		default:
			writeJSON(w, http.StatusOK, pod)
		}
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
