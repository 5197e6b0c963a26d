package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// The chart's pod-rules container parses, listens on the node's address,
// and its flags' defaults are what the chart passes.
func TestPodRulesFlagsAreTheChart(t *testing.T) {
	// podRules is off by default; its flags are what it renders when on.
	var args []string
	for _, s := range containerArgs(t, map[string]any{"podRules": map[string]any{"enabled": true}}, "pod-rules") {
		args = append(args, strings.NewReplacer("$(NODE_NAME)", "node-a", "$(POD_IP)", "10.0.0.5").Replace(s))
	}
	if len(args) == 0 || args[0] != podRulesCommand {
		t.Fatalf("pod-rules container args %q: want %s first", args, podRulesCommand)
	}
	c, err := parsePodRulesFlags(args[1:])
	if err != nil {
		t.Fatal(err)
	}
	d, err := parsePodRulesFlags([]string{"--host=10.0.0.5", "--node-name=node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if c.addr() != "10.0.0.5:9199" || c.port != d.port || c.netnsDir != d.netnsDir || c.tokenPath != d.tokenPath {
		t.Errorf("chart %+v, defaults %+v", *c, *d)
	}
}

// Unauthenticated: one address of the node, never all of them; and only
// this node's pods.
func TestPodRulesFlagsRefused(t *testing.T) {
	t.Setenv("POD_IP", "")
	t.Setenv("NODE_NAME", "node-a")
	for _, bad := range [][]string{nil, {"--host=0.0.0.0"}, {"--host=::"}, {"--host=node-a.example"}, {"--host=10.0.0.5", "--port=0"},
		{"--host=10.0.0.5", "--port=70000"}, {"--host=10.0.0.5", "--node-name="}, {"--host=10.0.0.5", "extra"}} {
		if _, err := parsePodRulesFlags(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
	c, err := parsePodRulesFlags([]string{"--host=fd00::5"})
	if err != nil || c.addr() != "[fd00::5]:9199" {
		t.Errorf("IPv6: %v, %+v", err, c)
	}
}

// A port already taken does not end the container (its pod would turn
// unready): it waits and serves once the port is free.
func TestPodRulesPortTaken(t *testing.T) {
	old := podRulesRetry
	podRulesRetry = 20 * time.Millisecond
	t.Cleanup(func() { podRulesRetry = old })
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := taken.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		servePodRules(ctx, addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "pod-rules") }), slog.New(slog.DiscardHandler))
		close(done)
	}()
	time.Sleep(100 * time.Millisecond) // several retries
	select {
	case <-done:
		t.Fatal("servePodRules returned while the port was taken")
	default:
	}
	taken.Close()
	testenv.Eventually(t, "served once the port is free", func() error {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "pod-rules" {
			return fmt.Errorf("answer %q", b)
		}
		return nil
	})
	cancel()
	<-done
}
