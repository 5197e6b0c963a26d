package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	gnft "github.com/google/nftables"

	"github.com/mesh-cni/mesh-cni/internal/backend/nftables"
	"github.com/mesh-cni/mesh-cni/internal/rules"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	proxyUID   = 1337
	appUID     = 1000
	streamPort = 7070
)

// TestStreamThroughRedirect: a long-lived client in a pod netns whose
// outbound traffic mesh-cni's nftables rules redirect to a relaying proxy,
// and an echoing peer in another netns. The stream is redirected (the
// proxy's record holds the original destination), counts round-trips and
// no errors; a killed connection and a stalled peer are counted as errors
// and the client connects again once the peer is back. Segments sent again
// are counted when the peer's netns drops packets, and only then: not for
// a stalled peer.
func TestStreamThroughRedirect(t *testing.T) {
	testenv.NeedRoot(t)
	tp := testenv.NewTopo(t)
	peer := startPeer(t, tp)
	tp.Serve(t, tp.Pod, testenv.Cred(proxyUID, proxyUID), "-name", "proxy", "-outbound", "15001", "-inbound", "15006", "-relay")
	spec := rules.Spec{Mesh: "test", Families: []rules.Family{rules.IPv4}, ProxyUID: proxyUID,
		InboundPort: 15006, OutboundPort: 15001, Mode: rules.Redirect}
	if err := nftables.New().Apply(tp.Pod.Path(), rules.Generate(spec)); err != nil {
		t.Fatal(err)
	}

	// The answer timeout is a margin for a loaded machine; the stall
	// below waits it out once.
	timeout := testenv.Scale(2 * time.Second)
	c := startStream(t, tp.Pod, "-interval", "20ms", "-report", "50ms", "-timeout", timeout.String(),
		net.JoinHostPort(testenv.PeerV4, fmt.Sprint(streamPort)))

	st := c.waitFor(t, "20 round-trips", func(s StreamStatus) bool { return s.RoundTrips >= 20 })
	if st.Errors != 0 || st.Connections != 1 || st.RetransSegs != 0 {
		t.Fatalf("steady stream: %d errors (%s), %d connections, %d segments sent again", st.Errors, st.LastError, st.Connections, st.RetransSegs)
	}
	if len(st.Records) != 2 {
		t.Fatalf("records: want the proxy's and the peer's, got %+v", st.Records)
	}
	want := net.JoinHostPort(testenv.PeerV4, fmt.Sprint(streamPort))
	if p := st.Records[0]; p.Name != "proxy" || p.Source != "original_dst" || p.Orig != want || p.UID != proxyUID {
		t.Errorf("proxy record %+v: want the proxy (uid %d) with original destination %s", p, proxyUID, want)
	}
	if p := st.Records[1]; p.Name != "peer" || p.Port != streamPort || hostOf(p.Peer) != testenv.PodV4 {
		t.Errorf("peer record %+v: want the peer's app port, reached from %s", p, testenv.PodV4)
	}

	// Sabotage: the connection is killed (the peer dies).
	if err := peer.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = peer.Wait()
	st = c.waitFor(t, "an error after the peer died", func(s StreamStatus) bool { return s.Errors >= 1 })
	t.Logf("killed: %d errors, last %q", st.Errors, st.LastError)
	before := st.RoundTrips
	peer = startPeer(t, tp)
	st = c.waitFor(t, "round-trips on a new connection", func(s StreamStatus) bool {
		return s.Connections >= 2 && s.RoundTrips >= before+10
	})

	// Sabotage: the peer stalls past the timeout; the gap shows it.
	errs := st.Errors
	if err := peer.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	st = c.waitFor(t, "a timeout while the peer is stopped", func(s StreamStatus) bool { return s.Errors > errs })
	if err := peer.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if st.LongestGapMs < timeout.Milliseconds() {
		t.Errorf("longest gap %d ms: want at least the timeout, %v", st.LongestGapMs, timeout)
	}
	before = st.RoundTrips
	st = c.waitFor(t, "round-trips after the stall", func(s StreamStatus) bool { return s.RoundTrips >= before+10 })
	// A stalled process is no loss: its kernel acknowledged for it.
	if st.RetransSegs != 0 {
		t.Errorf("after the peer's stall: %d segments sent again, want 0", st.RetransSegs)
	}

	// Sabotage: the peer's netns drops every packet until the client's
	// netns has sent a segment again.
	dropAll(t, tp.Peer)
	c.waitFor(t, "a segment sent again while the peer drops", func(s StreamStatus) bool { return s.RetransSegs > 0 })
	undropAll(t, tp.Peer)
	before = st.RoundTrips
	c.waitFor(t, "round-trips after the drop", func(s StreamStatus) bool { return s.RoundTrips >= before+10 })

	st = c.stop(t)
	t.Logf("final: %+v", st)
}

const dropTable = "testproxy-drop"

// dropAll makes netns n drop every packet it receives: a base input chain
// whose policy is drop.
func dropAll(t *testing.T, n ns.NetNS) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		c, err := gnft.New()
		if err != nil {
			return err
		}
		drop := gnft.ChainPolicyDrop
		tab := c.AddTable(&gnft.Table{Family: gnft.TableFamilyINet, Name: dropTable})
		c.AddChain(&gnft.Chain{Name: "input", Table: tab, Type: gnft.ChainTypeFilter,
			Hooknum: gnft.ChainHookInput, Priority: gnft.ChainPriorityFilter, Policy: &drop})
		return c.Flush()
	})
	if err != nil {
		t.Fatalf("dropping the peer's packets: %v", err)
	}
}

func undropAll(t *testing.T, n ns.NetNS) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		c, err := gnft.New()
		if err != nil {
			return err
		}
		c.DelTable(&gnft.Table{Family: gnft.TableFamilyINet, Name: dropTable})
		return c.Flush()
	})
	if err != nil {
		t.Fatalf("letting the peer's packets in again: %v", err)
	}
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

// startPeer runs the echoing peer as root in the peer netns, and waits
// until it listens; the test kills it, so Topo.Serve (which keeps its
// processes) does not start it.
func startPeer(t *testing.T, tp *testenv.Topo) *exec.Cmd {
	t.Helper()
	ready := filepath.Join(tp.Dir(), fmt.Sprintf("peer-ready-%d", time.Now().UnixNano()))
	cmd := exec.Command(testenv.TestProxy(t), "serve", "-name", "peer", "-ports", fmt.Sprint(streamPort), "-echo", "-ready", ready)
	cmd.Stderr = os.Stderr
	if err := tp.Peer.Do(func(ns.NetNS) error { return cmd.Start() }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testenv.Eventually(t, "the peer listens", func() error { _, err := os.Stat(ready); return err })
	return cmd
}

type streamClient struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	last StreamStatus
	n    int
	done chan struct{}
}

// startStream runs `testproxy stream args...` as the app's UID in netns n
// and keeps its latest status line.
func startStream(t *testing.T, n ns.NetNS, args ...string) *streamClient {
	t.Helper()
	cmd := exec.Command(testenv.TestProxy(t), append([]string{"stream"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: testenv.Cred(appUID, appUID)}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Do(func(ns.NetNS) error { return cmd.Start() }); err != nil {
		t.Fatal(err)
	}
	c := &streamClient{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var s StreamStatus
			if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
				t.Errorf("status line %q: %v", sc.Text(), err)
				continue
			}
			c.mu.Lock()
			c.last, c.n = s, c.n+1
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-c.done; _ = cmd.Wait() })
	return c
}

func (c *streamClient) waitFor(t *testing.T, what string, ok func(StreamStatus) bool) StreamStatus {
	t.Helper()
	var st StreamStatus
	testenv.Eventually(t, "stream: "+what, func() error {
		c.mu.Lock()
		st = c.last
		c.mu.Unlock()
		if !ok(st) {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	return st
}

// stop ends the client as a pod's deletion does (SIGTERM): it prints a last
// status and exits 0.
func (c *streamClient) stop(t *testing.T) StreamStatus {
	t.Helper()
	c.mu.Lock()
	n := c.n
	c.mu.Unlock()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-c.done
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("stream client exit: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n <= n {
		t.Error("no status line at SIGTERM")
	}
	return c.last
}
