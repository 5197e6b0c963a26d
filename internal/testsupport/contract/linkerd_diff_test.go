package contract

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// linkerdUpstream is the stand-in for linkerd-cni: the rules its source
// writes for each pod, transcribed and cited line by line (the file says
// why and from which commit).
const linkerdUpstream = "testdata/linkerd-upstream/rules.txt"

// linkerdDeliberate lists where mesh-cni differs from linkerd-cni on
// purpose (see diffRun.deliberate for the keys); internal/mesh/README.md says
// why in its parity table.
var linkerdDeliberate = map[[2]string]string{
	{"app-proxy-uid", "ADD"}:                           "the app runs as the proxy's UID: linkerd-cni sets the pod up and the app's traffic bypasses the proxy unseen; mesh-cni refuses the pod, naming the container",
	{"proxy-gid", "app tcp 198.18.10.2:5432"}:          "the app's primary GID is the proxy's: linkerd-cni's --gid-owner rule exempts the app; mesh-cni exempts no GID an app container shares",
	{"proxy-gid", "app tcp 198.18.10.2:8080"}:          "the app's primary GID is the proxy's: linkerd-cni's --gid-owner rule exempts the app; mesh-cni exempts no GID an app container shares",
	{"proxy-gid", "app tcp 198.18.10.2:53"}:            "the app's primary GID is the proxy's: linkerd-cni's --gid-owner rule exempts the app; mesh-cni exempts no GID an app container shares",
	{"skip", "ADD"}:                                    "an IPv6 entry in skip-subnets: linkerd-cni's IPv4 pass hands it to iptables, which refuses it, and ADD fails; mesh-cni skips it for IPv6",
	{"edge-skip-subnets-v6", "ADD"}:                    "an IPv6 entry in skip-subnets: linkerd-cni's IPv4 pass hands it to iptables, which refuses it, and ADD fails; mesh-cni skips it for IPv6",
	{"edge-ports-spaces", "app tcp 198.18.10.2:6379"}:  "\" 6379\" after a comma: linkerd-cni does not trim it, fails to parse it and drops it silently; mesh-cni trims it and skips the port",
	{"edge-ports-spaces", "root tcp 198.18.10.2:6379"}: "\" 6379\" after a comma: linkerd-cni does not trim it, fails to parse it and drops it silently; mesh-cni trims it and skips the port",
	{"edge-ports-spaces", "peer tcp 198.18.10.1:9091"}: "\" 9091\" after a comma: linkerd-cni does not trim it, fails to parse it and drops it silently; mesh-cni trims it and skips the port",
	{"edge-port-zero", "ADD"}:                          "port 0 in skip-outbound-ports: linkerd-cni accepts it (no connection has port 0); mesh-cni fails ADD naming the annotation and value",
	{"edge-bad-range", "ADD"}:                          "a reversed range in skip-outbound-ports: linkerd-cni logs it and drops it; mesh-cni fails ADD naming the annotation and value, so nothing is silently lost",
}

// linkerdPods are the Linkerd fixture pods and hand-made edge cases
// derived from the default one.
func linkerdPods(t *testing.T) []diffPod {
	t.Helper()
	files := fixtures(t, "testdata/linkerd/*.yaml")
	out := loadDiffPods(t, files...)
	load := func(f string) diffPod { return loadDiffPods(t, f)[0] }
	edge := func(name string, ann map[string]string, proxyUID int64) {
		d := load("testdata/linkerd/default.yaml")
		d.name, d.pod.Name = name, name
		for k, v := range ann {
			d.pod.Annotations[k] = v
		}
		if proxyUID != 0 {
			container(d.pod, "linkerd-proxy").SecurityContext.RunAsUser = &proxyUID
		}
		out = append(out, d)
	}
	many := make([]string, 8)
	for i := range many {
		many[i] = fmt.Sprintf("%d-%d", 5001+2*i, 5002+2*i)
	}
	edge("edge-skip-inbound", map[string]string{mesh.LinkerdSkipInboundPorts: "9090,8000-8010"}, 0)
	edge("edge-skip-outbound-ranges", map[string]string{mesh.LinkerdSkipOutboundPorts: "5432,6000-6010,7000"}, 0)
	edge("edge-many-ports", map[string]string{mesh.LinkerdSkipOutboundPorts: strings.Join(many, ",")}, 0)
	edge("edge-skip-subnets-v4", map[string]string{mesh.LinkerdSkipSubnets: "198.19.0.0/16, 203.0.113.0/24"}, 0)
	edge("edge-skip-subnets-v6", map[string]string{mesh.LinkerdSkipSubnets: "fd10::/16"}, 0)
	edge("edge-proxy-uid", map[string]string{mesh.LinkerdProxyUID: "2103"}, 2103)
	edge("edge-ports-spaces", map[string]string{mesh.LinkerdSkipOutboundPorts: "5432, 6379", mesh.LinkerdSkipInboundPorts: "9090, 9091"}, 0)
	edge("edge-empty-lists", map[string]string{mesh.LinkerdSkipOutboundPorts: "", mesh.LinkerdSkipInboundPorts: "", mesh.LinkerdSkipSubnets: ""}, 0)
	edge("edge-empty-ids", map[string]string{mesh.LinkerdProxyUID: "", mesh.LinkerdProxyGID: ""}, 0)
	edge("edge-port-zero", map[string]string{mesh.LinkerdSkipOutboundPorts: "0,5432"}, 0)
	edge("edge-bad-range", map[string]string{mesh.LinkerdSkipOutboundPorts: "6010-6000,5432"}, 0)
	return out
}

// TestLinkerdDifferential sets every Linkerd fixture pod and edge case up
// twice in fresh network namespaces: once with the rules linkerd-cni
// writes for it (testdata/linkerd-upstream/rules.txt, a stand-in
// transcribed from linkerd2-proxy-init, whose plugin cannot be built
// here), once with mesh-cni (each backend), and compares where each probe
// lands: outbound TCP and UDP from every app identity, the proxy's and
// root's to the peer, its skipped ports, the skipped subnets, loopback and
// the pod's own address; inbound from the peer, from inside and outside
// the skipped subnets, to the app's, skipped and proxy ports. IPv4 only:
// linkerd-cni programs IPv6 only with "ipv6": true, off in its chart.
func TestLinkerdDifferential(t *testing.T) {
	testenv.NeedRoot(t)
	if _, err := exec.LookPath("iptables-nft-restore"); err != nil {
		t.Fatal("iptables-nft-restore (the iptables-nft backend needs it too): not found")
	}
	upstream := readLinkerdUpstream(t)
	plugins := testenv.PluginDir(t)
	testenv.TestProxy(t)
	run := newDiffRun("linkerd-cni", linkerdDeliberate)
	pods := linkerdPods(t)
	used := map[string]bool{}
	for _, d := range pods {
		name, kp := d.name, d.pod
		lines, ok := upstream[name]
		if !ok {
			t.Fatalf("%s: no rules for pod %s", linkerdUpstream, name)
		}
		used[name] = true
		w, err := linkerdProbes(kp, d.img)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// Each pod's sides are set up in netns of their own: the pods
		// run in parallel, each probe's wait next to the others'.
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			theirs, terr := landings(t, w, false, func(tp *testenv.Topo) error {
				return restoreIn(tp, lines)
			})
			for _, bname := range backends {
				ours, err := landings(t, w, false, func(tp *testenv.Topo) error {
					return meshAdd(t, tp, kp, plugins, bname)
				})
				run.compare(t, name, bname, theirs, terr, ours, err)
			}
		})
	}
	for name := range upstream {
		if !used[name] {
			t.Errorf("%s: rules for %s, which is no pod of the test", linkerdUpstream, name)
		}
	}
	// Once every pod's subtest is done.
	t.Cleanup(func() {
		seen := run.seen(t, []string{"proxy:4140", "proxy:4143", "app:*", "peer:*", "no answer:*"}, "no answer:*")
		t.Logf("linkerd-cni (transcribed rules) vs mesh-cni (nftables, iptables-nft): %d pods, %d landings compared, %d the same; linkerd-cni's landings: %s\n%s",
			len(pods), run.total, run.same, seen, run.lines(pods))
	})
}

// linkerdProbes is the pod's promise with the skip lists read as leniently
// as either side reads them, so every port either side may skip is probed:
// each entry trimmed, a range probed at both ends and just past it, and
// entries neither side can skip (port 0, reversed ranges) left out.
func linkerdProbes(kp *corev1.Pod, img map[string]Image) (*promise, error) {
	p := kp.DeepCopy()
	a := p.Annotations
	out, in, subnets := a[mesh.LinkerdSkipOutboundPorts], a[mesh.LinkerdSkipInboundPorts], a[mesh.LinkerdSkipSubnets]
	delete(a, mesh.LinkerdSkipOutboundPorts)
	delete(a, mesh.LinkerdSkipInboundPorts)
	delete(a, mesh.LinkerdSkipSubnets)
	w, err := promised(p, img)
	if err != nil {
		return nil, err
	}
	w.excludePorts = probePorts(out)
	w.inExclude = append(probePorts(in), 4190, 4191)
	w.alsoProbe, err = prefixes(subnets)
	return w, err
}

func probePorts(v string) []int {
	var out []int
	for _, f := range list(v) {
		lo, hi, isRange := strings.Cut(f, "-")
		if !isRange {
			hi = lo
		}
		first, err1 := strconv.Atoi(lo)
		last, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || first < 1 || last > 65535 || first > last {
			continue
		}
		out = append(out, first, last)
		if isRange && last < 65535 {
			out = append(out, last+1)
		}
	}
	return uniq(out)
}

// citation is where a transcribed rule says upstream writes it.
var citation = regexp.MustCompile(` @ (ipt|main|root|util):\d`)

// readLinkerdUpstream reads the stand-in's rules by pod; every rule must
// say where upstream writes it.
func readLinkerdUpstream(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(linkerdUpstream)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	pod := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			pod = strings.Trim(line, "[]")
			if _, dup := out[pod]; dup {
				t.Fatalf("%s:%d: pod %s twice", linkerdUpstream, n, pod)
			}
			out[pod] = nil
		case pod == "":
			t.Fatalf("%s:%d: a rule before any [pod]", linkerdUpstream, n)
		default:
			loc := citation.FindStringIndex(line)
			if loc == nil {
				t.Fatalf("%s:%d: a rule without ' @ file:line' saying where upstream writes it: %s", linkerdUpstream, n, line)
			}
			out[pod] = append(out[pod], line[:loc[0]])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// restoreIn loads rules into the pod's nat table with iptables-nft, as
// the chart's iptablesMode "nft" has linkerd-cni use it.
func restoreIn(tp *testenv.Topo, rules []string) error {
	in := "*nat\n" + strings.Join(rules, "\n") + "\nCOMMIT\n"
	cmd := exec.Command("nsenter", "--net="+tp.Pod.Path(), "--", "iptables-nft-restore", "--noflush")
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stderr = strings.NewReader(in), &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("iptables-nft-restore: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// TestLinkerdUpstreamFixtureTestOnly: the stand-in is test data; no
// product code may read it.
func TestLinkerdUpstreamFixtureTestOnly(t *testing.T) {
	root := "../../.."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("linkerd-upstream")) {
			t.Errorf("%s refers to the test-only stand-in %s", path, linkerdUpstream)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
