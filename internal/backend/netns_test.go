package backend_test

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// Addresses of the shared test topology (internal/testsupport/testenv): pod eth0 <-> peer
// eth1, and a "remote" network behind the peer used as a skip subnet.
const (
	podV4    = testenv.PodV4
	peerV4   = testenv.PeerV4
	remoteV4 = testenv.RemoteV4
	podV6    = testenv.PodV6
	peerV6   = testenv.PeerV6
	remoteV6 = testenv.RemoteV6

	proxyUID = 1337
	appUID   = 1000

	outboundPort = 15001
	inboundPort  = 15006
	dnsPort      = 15053
	appPort      = 8080 // app listens in the pod, peer listens too
	ignoredOut   = 9090 // peer listens; never redirected outbound
	ignoredIn    = 9091 // app listens; never redirected inbound
)

type record = testenv.Record

// topo is the shared pod/peer topology with this package's shorthands.
type topo struct {
	*testenv.Topo
	pod, peer ns.NetNS
}

func newTopo(t testing.TB) *topo {
	tp := testenv.NewTopo(t)
	return &topo{Topo: tp, pod: tp.Pod, peer: tp.Peer}
}

// cred is uid with gid = uid; nil for root.
func cred(uid uint32) *syscall.Credential {
	if uid == 0 {
		return nil
	}
	return testenv.Cred(uid, uid)
}

// start runs testproxy serve in netns n as uid (0: root).
func (tp *topo) start(t testing.TB, n ns.NetNS, uid uint32, args ...string) {
	t.Helper()
	tp.Serve(t, n, cred(uid), args...)
}

// connect runs testproxy connect in netns n as uid.
func connect(n ns.NetNS, uid uint32, udp bool, host string, port int) (record, error) {
	return testenv.Connect(n, cred(uid), udp, host, port)
}

// run runs a command in netns n and returns its output. iptables takes the
// netns' own lock, never the host-wide one.
func run(n ns.NetNS, name string, args ...string) (string, error) {
	var out []byte
	err := n.Do(func(ns.NetNS) error {
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), "XTABLES_LOCKFILE="+n.Path())
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	return string(out), err
}
