//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// Long-lived meshed clients: each holds one TCP connection to an echoing
// peer through its sidecar (the test proxy relaying to the original
// destination) and sends a line every 100 ms; `testproxy stream` prints
// its counters every second (internal/testsupport/testproxy/stream.go).
const (
	streamPort = 7070
	streamPeer = "stream-peer"
)

// streamStatus is one status line of `testproxy stream` (testproxy.StreamStatus).
type streamStatus struct {
	Connections  int      `json:"connections"`
	RoundTrips   int      `json:"roundTrips"`
	Errors       int      `json:"errors"`
	LastError    string   `json:"lastError"`
	LongestGapMs int64    `json:"longestGapMs"`
	RetransSegs  int64    `json:"retransSegs"`
	Records      []record `json:"records"`
}

// streamPeerPod serves streamPort: its record, then an echo.
func streamPeerPod(name, node string) *corev1.Pod {
	p := plainPod(name, node)
	p.Spec.Containers[0].Command = []string{"/testproxy", "serve", "-name", name, "-ports", strconv.Itoa(streamPort), "-echo"}
	return p
}

// streamClientPod is a meshed pod (Linkerd's contract) whose app streams to
// target and whose proxy relays what it is redirected.
func streamClientPod(name, node, target string) *corev1.Pod {
	p := meshedPod(name, node, linkerd, nil)
	p.Spec.Containers[0].Command = []string{"/testproxy", "stream", "-interval", "100ms", "-report", "1s",
		"-timeout", testenv.Scale(10 * time.Second).String(), "-setup", testenv.Scale(time.Minute).String(), target}
	p.Spec.Containers[1].Command = append(p.Spec.Containers[1].Command, "-relay")
	return p
}

// startStreams starts one long-lived client per node, streaming to
// peerIP, and waits for each one's first round-trip. It returns their
// names, in node order.
func startStreams(ctx context.Context, ns, peerIP string, nodeNames []string) []string {
	target := hostPort(peerIP, streamPort)
	var pods []*corev1.Pod
	var names []string
	for i, n := range nodeNames {
		pods = append(pods, streamClientPod(fmt.Sprintf("stream-%d", i), n, target))
		names = append(names, pods[i].Name)
	}
	startPods(ctx, ns, pods...)
	for _, name := range names {
		Eventually(ctx, func(g Gomega) {
			st, err := streamOf(ctx, ns, name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.RoundTrips).To(BeNumerically(">", 0), "stream client %s: no round-trip yet", name)
		}).WithTimeout(testenv.Scale(time.Minute)).WithPolling(time.Second).Should(Succeed())
	}
	return names
}

// streamOf reads a client's latest status line from its log.
func streamOf(ctx context.Context, ns, pod string) (streamStatus, error) {
	raw, err := client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "app", TailLines: ptr.To[int64](5)}).DoRaw(ctx)
	if err != nil {
		return streamStatus{}, fmt.Errorf("logs of %s: %w", pod, err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var st streamStatus
		if json.Unmarshal([]byte(lines[i]), &st) == nil {
			return st, nil
		}
	}
	return streamStatus{}, fmt.Errorf("no status line from %s in %q", pod, raw)
}

// expectStreamsAdvanced: every client is on its first connection with no
// error, and has made more round-trips than at the last look (last, by
// pod; updated).
func expectStreamsAdvanced(ctx context.Context, ns, phase string, names []string, last map[string]streamStatus) {
	for _, name := range names {
		// A status line comes every second: wait for one past the last look.
		var st streamStatus
		Eventually(ctx, func(g Gomega) {
			var err error
			st, err = streamOf(ctx, ns, name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.RoundTrips).To(BeNumerically(">", last[name].RoundTrips), "%s: no round-trip during %q", name, phase)
		}).WithTimeout(testenv.Scale(30 * time.Second)).WithPolling(time.Second).Should(Succeed())
		GinkgoWriter.Printf("%s after %q: %d round-trips, %d errors, %d connection(s), longest gap %d ms\n",
			name, phase, st.RoundTrips, st.Errors, st.Connections, st.LongestGapMs)
		Expect(st.Errors).To(BeZero(), "%s: connection errors during %q, the last: %s", name, phase, st.LastError)
		Expect(st.Connections).To(Equal(1), "%s: connected again during %q", name, phase)
		last[name] = st
	}
}

// expectStreamsHeld: at the end, each client's one connection was
// redirected to its proxy (the proxy's record holds the original
// destination) and relayed to the peer, no container restarted (a restart
// would reset the counters), and the pod sent no TCP segment again: no
// packet of the client's or its proxy's connection was lost. A cut shorter
// than the client's timeout shows only there; the longest gap between
// round-trips is reported, not bounded, as a busy node stretches it too.
// It prints and reports each client's figures.
func expectStreamsHeld(ctx context.Context, ns, peerIP string, names []string, last map[string]streamStatus) {
	pods := map[string]*corev1.Pod{}
	for _, name := range names { // every client's figures first, then the checks
		st := last[name]
		pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		pods[name] = pod
		figures := fmt.Sprintf("node %s: %d round-trips on %d connection(s), %d errors, %d TCP segments sent again, longest gap between round-trips %d ms",
			pod.Spec.NodeName, st.RoundTrips, st.Connections, st.Errors, st.RetransSegs, st.LongestGapMs)
		GinkgoWriter.Printf("long-lived client %s, %s\n", name, figures)
		AddReportEntry("long-lived client "+name, figures)
	}
	for _, name := range names {
		st, pod := last[name], pods[name]
		for _, cs := range pod.Status.ContainerStatuses {
			Expect(cs.RestartCount).To(BeZero(), "%s: container %s restarted", name, cs.Name)
		}
		Expect(st.Records).To(HaveLen(2), "%s: want the proxy's and the peer's records, got %+v", name, st.Records)
		Expect(st.Records[0].Name).To(Equal("proxy"), "%s: the stream did not reach its proxy: %+v", name, st.Records)
		Expect(st.Records[0].Orig).To(Equal(hostPort(peerIP, streamPort)), "%s: original destination", name)
		Expect(st.Records[0].UID).To(BeEquivalentTo(linkerd.uid), "%s: the proxy's UID", name)
		Expect(st.Records[1].Name).To(Equal(streamPeer), "%s: the relayed connection's far end", name)
		Expect(st.Records[1].Port).To(Equal(streamPort), "%s: the relayed connection's far end", name)
		Expect(st.RetransSegs).To(BeZero(), "%s: TCP segments sent again (-1: unread): packets were lost", name)
	}
}
