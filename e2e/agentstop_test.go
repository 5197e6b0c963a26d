//go:build e2e

package e2e

import (
	"context"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// agentStops follows the agent container of every running agent pod from
// now until it exits, so that what each agent decided at its stop can be
// read once its pod is gone (the node keeps no log of a deleted pod).
type agentStops struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	logs   map[string]*strings.Builder // by node
}

func followAgentStops(ctx context.Context) *agentStops {
	pods, err := client.CoreV1().Pods(meshNamespace).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &agentStops{cancel: cancel, logs: map[string]*strings.Builder{}}
	none := int64(0)
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" {
			continue
		}
		opts := &corev1.PodLogOptions{Container: "agent", Follow: true, TailLines: &none}
		stream, err := client.CoreV1().Pods(meshNamespace).GetLogs(p.Name, opts).Stream(fctx)
		if err != nil {
			continue // not an agent pod (no such container), or already stopping
		}
		b := &strings.Builder{}
		s.logs[p.Spec.NodeName] = b
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer stream.Close()
			buf := make([]byte, 4096)
			for {
				n, err := stream.Read(buf)
				s.mu.Lock()
				b.Write(buf[:n])
				s.mu.Unlock()
				if err != nil {
					return // io.EOF: the container exited
				}
			}
		}()
	}
	return s
}

// expectUninstalled: every followed agent logged that it uninstalled
// mesh-cni from its node at its stop, and if not, what it logged instead
// (its decision and why). Call it once the agent pods are gone.
func (s *agentStops) expectUninstalled() {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(testenv.Scale(time.Minute)): // a log stream the API server did not end
	}
	s.cancel()
	<-done
	s.mu.Lock()
	defer s.mu.Unlock()
	for node, b := range s.logs {
		Expect(b.String()).To(ContainSubstring(`"msg":"uninstalled"`),
			"the agent on %s did not uninstall mesh-cni at its stop; its last words:\n%s", node, tail(b.String(), 20))
	}
}
