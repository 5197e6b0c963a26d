package rules

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// sendInvalid sends n TCP segments with SYN and RST both set (a flag
// combination conntrack marks INVALID: tcp_valid_flags in
// nf_conntrack_proto_tcp.c) from this netns to dst:port, through a raw
// socket. It runs as a helper inside the peer netns.
func sendInvalid(dst string, port, n int) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	to := netip.MustParseAddr(dst).As4()
	from := netip.MustParseAddr(peerIP4).As4()
	seg := make([]byte, 20)
	binary.BigEndian.PutUint16(seg[0:], 40000)
	binary.BigEndian.PutUint16(seg[2:], uint16(port))
	binary.BigEndian.PutUint32(seg[4:], 1)
	seg[12] = 5 << 4
	seg[13] = 0x02 | 0x04 // SYN | RST
	binary.BigEndian.PutUint16(seg[14:], 1024)
	// Checksum over the pseudo-header and the segment.
	var sum uint32
	pseudo := append(append(append([]byte{}, from[:]...), to[:]...), 0, unix.IPPROTO_TCP, 0, 20)
	for _, b := range [][]byte{pseudo, seg} {
		for i := 0; i < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(seg[16:], ^uint16(sum))
	for range n {
		if err := unix.Sendto(fd, seg, 0, &unix.SockaddrInet4{Addr: to}); err != nil {
			return err
		}
	}
	return nil
}

var counter = regexp.MustCompile(`\[(\d+):\d+\] -A MESH_DROP_INVALID|counter packets (\d+) bytes \d+ drop`)

// TestTrafficDropInvalid: with DropInvalid (Kuma's drop-invalid-packets),
// packets conntrack finds INVALID are dropped in mangle PREROUTING, with
// both renderers, and a valid inbound connection still lands at the
// proxy. The drop rule's own counter shows each INVALID packet hit it.
func TestTrafficDropInvalid(t *testing.T) {
	needTrafficTools(t)
	spec := Spec{Mesh: "kuma", Families: v4, ProxyUID: proxyUID, InboundPort: 4143, OutboundPort: 4140,
		Mode: Redirect, DropInvalid: true}
	for _, renderer := range []string{"nft", "iptables"} {
		t.Run(renderer, func(t *testing.T) {
			tp := newTopology(t, "d"+renderer[:1])
			tp.apply(t, Generate(spec), renderer)
			listen(t, tp.pod, proxyUID, false, "proxy", "tcp:[::]:4143")
			const sent = 3
			cmd := exec.Command("ip", "netns", "exec", tp.peer, os.Args[0], "-test.run=^$", fmt.Sprintf("invalid 0 %s 8080 %d", podIP4, sent))
			cmd.Env = append(os.Environ(), helperEnv+"=1")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("send INVALID segments: %v: %s", err, out)
			}
			list := []string{"nft", "list", "chain", NftFamily, NftTable, ChainDropInvalid}
			if renderer == "iptables" {
				list = []string{"iptables-save", "-c", "-t", "mangle"}
			}
			dump := run(t, "", append([]string{"ip", "netns", "exec", tp.pod}, list...)...)
			m := counter.FindStringSubmatch(dump)
			if m == nil {
				t.Fatalf("no drop-invalid rule:\n%s", dump)
			}
			if got, _ := strconv.Atoi(m[1] + m[2]); got != sent {
				t.Errorf("drop-invalid counted %d packets, sent %d INVALID ones:\n%s", got, sent, dump)
			}
			checkProbes(t, tp, []probe{
				{"valid inbound still lands at the inbound port", true, 0, "tcp", podIP4 + ":8080", "orig=" + podIP4 + ":8080", ""},
			})
			if strings.Contains(dump, "policy drop") {
				t.Errorf("the chain must only drop INVALID packets:\n%s", dump)
			}
		})
	}
}
