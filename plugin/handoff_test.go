package main

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// TestSocketsHandedToAgent: with the nftables backend, ADD and DEL pass
// every nf_tables netlink socket they opened to the agent with their
// report, so the kernel's wait on the last close (an RCU grace period
// after DEL's commit) is the agent's, not the pod's. DEL still leaves
// nothing of ours while the agent holds the sockets: the rules are gone
// when the commit returns; only their memory waits.
func TestSocketsHandedToAgent(t *testing.T) {
	env := newNodeEnv(t)
	env.holdPassedFDs()
	c := newChain(t, env, chainOpts{version: "1.0.0", families: "dual", subnet: 220, mesh: map[string]any{"backend": "nftables"}})
	p := newPod(t, "shop", "web-1", istioAnnotations(nil))
	c.mustAdd(p)
	if got := ours(ruleDump(t, p.netns.Path())); len(got) == 0 {
		t.Fatal("ADD wrote no rules")
	}
	if err := c.del(p); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	testenv.EventuallyTrue(t, "ADD and DEL reports", func() bool { return len(env.reported()) >= 2 })
	if got := ours(ruleDump(t, p.netns.Path())); len(got) != 0 {
		t.Errorf("DEL left rules via %v while the agent holds its sockets", got)
	}
	evs, fds := env.reported(), env.reportedFDs()
	for i, ev := range evs {
		n := 0
		for _, fd := range fds[i] {
			proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
			if err != nil {
				t.Errorf("%s report: passed fd %d: %v", ev.Command, fd, err)
				continue
			}
			if proto == unix.NETLINK_NETFILTER {
				n++
			}
		}
		// ADD: the backend probe and the transaction; DEL: the removal.
		if n == 0 {
			t.Errorf("%s report (%s) carried %d fds, none an nf_tables netlink socket", ev.Command, ev.Decision, len(fds[i]))
		}
	}
}
