package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	"k8s.io/client-go/rest"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// seen is a fixed answer of the watch, for decisions that do not wait.
func seen(deleted bool) func() bool { return func() bool { return deleted } }

// heldWatches hands out DaemonSet watches whose events reach the reader
// only once release is closed: an agent that has not read them yet (a
// loaded node). Events still held when the watch's context ends are lost,
// as the bytes of a closed stream are.
type heldWatches struct {
	appsv1client.DaemonSetsGetter
	release chan struct{}
}

type heldDaemonSets struct {
	appsv1client.DaemonSetInterface
	release chan struct{}
}

func (h heldWatches) DaemonSets(ns string) appsv1client.DaemonSetInterface {
	return heldDaemonSets{h.DaemonSetsGetter.DaemonSets(ns), h.release}
}

func (h heldDaemonSets) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := h.DaemonSetInterface.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := make(chan watch.Event)
	held := watch.NewProxyWatcher(out)
	go func() {
		defer close(out)
		defer w.Stop()
		for ev := range w.ResultChan() {
			select {
			case <-h.release:
			case <-ctx.Done():
				return
			case <-held.StopChan():
				return
			}
			select {
			case out <- ev:
			case <-held.StopChan():
				return
			}
		}
	}()
	return held, nil
}

// helm uninstall on a loaded node: the DaemonSet is deleted, then the
// agent's RBAC, and SIGTERM comes before the agent has read the deletion
// off its watch. The lookup at stop is refused (403); the decision waits
// for the open watch, which still delivers the deletion: uninstall. With
// no deletion on its way (an RBAC change during a rollout) it keeps the
// node as it is once the wait is over.
func TestStopSeesADeletionStillOnItsWay(t *testing.T) {
	env := testenv.Start(t)
	ns, client, _ := agentClient(t, env)
	ctx := context.Background()
	cfg := &config{uninstallMode: "auto", namespace: ns, daemonSetName: "mesh-cni"}
	release := make(chan struct{})
	sig, sigterm := context.WithCancel(ctx)
	probe, stopProbe := startProbe(sig, heldWatches{client.AppsV1(), release}, cfg, slog.New(slog.DiscardHandler))
	defer stopProbe()
	testenv.EventuallyTrue(t, "the probe watches the DaemonSet", probe.watching.Load)

	if err := env.Client.AppsV1().DaemonSets(ns).Delete(ctx, "mesh-cni", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.RbacV1().RoleBindings(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		_, err := client.AppsV1().DaemonSets(ns).Get(ctx, "mesh-cni", metav1.GetOptions{})
		return apierrors.IsForbidden(err)
	})
	sigterm()
	if probe.deleted.Load() {
		t.Fatal("the deletion was read before it was released")
	}
	// Nothing on its way yet: a short wait ends in keeping the node.
	if u, why := shouldUninstall(client.AppsV1(), cfg, func() bool { return probe.deletedWithin(100 * time.Millisecond) }); u {
		t.Fatalf("uninstalled with no deletion delivered: %s", why)
	}
	time.AfterFunc(200*time.Millisecond, func() { close(release) })
	u, why := shouldUninstall(client.AppsV1(), cfg, func() bool { return probe.deletedWithin(testenv.Timeout()) })
	if !u || !strings.Contains(why, "was deleted") {
		t.Fatalf("a deletion the watch delivered after SIGTERM: uninstall=%v (%s), want an uninstall", u, why)
	}
}

// The agent's clients bound every request by restConfig's Timeout. A watch
// is one request whose answer lasts: bounded the same way it was cut and
// reopened every Timeout, and the DaemonSet probe missed an uninstall that
// came between two watches (its RBAC gone by the next lookup). Here the
// Timeout is 1 s and the watches must outlive it.
func TestWatchesOutliveTheRequestTimeout(t *testing.T) {
	env := testenv.Start(t)
	ns, _, token := agentClient(t, env)
	rc := env.TokenConfig(token)
	rc.Timeout = time.Second
	c, err := clientsFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := &config{uninstallMode: "auto", namespace: ns, daemonSetName: "mesh-cni"}
	probe, stopProbe := startProbe(ctx, c.apps, cfg, slog.New(slog.DiscardHandler))
	defer stopProbe()
	testenv.EventuallyTrue(t, "the probe watches the DaemonSet", probe.watching.Load)
	pods, err := c.pods.Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Stop()

	outlived := time.After(3 * rc.Timeout) // how long the watches must last: not a speed bound
	for done := false; !done; {
		select {
		case _, open := <-pods.ResultChan():
			if !open {
				t.Fatalf("the pod watch was closed within %s (request timeout %s)", 3*rc.Timeout, rc.Timeout)
			}
		case <-outlived:
			done = true
		}
	}
	if n := probe.opened.Load(); n != 1 || !probe.watching.Load() {
		t.Fatalf("the DaemonSet probe opened %d watches in %s (request timeout %s), watching now: %v; want one, still open",
			n, 3*rc.Timeout, rc.Timeout, probe.watching.Load())
	}
	// Requests stay bounded: the request clients keep the Timeout.
	if got := c.core.RESTClient().(*rest.RESTClient).Client.Timeout; got != rc.Timeout {
		t.Fatalf("the core client's request timeout is %s, want %s", got, rc.Timeout)
	}
}
