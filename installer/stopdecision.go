package main

// What a stop means: the DaemonSet probe that watches for helm uninstall,
// and the decision at SIGTERM to uninstall or keep the node as it is.

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"

	"github.com/mesh-cni/mesh-cni/internal/retry"
)

// dsProbe watches the agent's DaemonSet while the release is installed and
// remembers whether the API server said it was deleted (gone, or carrying
// a deletion timestamp). helm uninstall deletes the DaemonSet, then the
// ServiceAccount and bindings, without waiting for the pods: by SIGTERM the
// lookup may be refused, but the watch, opened while access worked, has
// already seen the delete.
type dsProbe struct {
	daemonSets appsv1client.DaemonSetsGetter
	namespace  string
	name       string
	log        *slog.Logger
	backoff    wait.Backoff // zero: retry.Backoff(time.Minute)
	allowed    atomic.Bool  // a GET was answered once
	deleted    atomic.Bool  // the last word of the API server: deleted
	watching   atomic.Bool  // a watch is open
	opened     atomic.Int32 // watches opened so far
}

// stopWatchWait bounds how long the decision at stop waits for an open
// watch to deliver a deletion (deletedWithin).
const stopWatchWait = 5 * time.Second

// startProbe runs a DaemonSet probe until stop is called. It outlives ctx's
// cancellation on purpose: SIGTERM cancels ctx, and the decision that
// follows still needs the watch (deletedWithin).
func startProbe(ctx context.Context, daemonSets appsv1client.DaemonSetsGetter, cfg *config, log *slog.Logger) (p *dsProbe, stop func()) {
	p = &dsProbe{daemonSets: daemonSets, namespace: cfg.namespace, name: cfg.daemonSetName, log: log}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); p.run(pctx) }()
	return p, func() { cancel(); <-done }
}

// deletedWithin says whether the API server said the DaemonSet was
// deleted, waiting up to d while a watch is open. helm uninstall deletes
// the DaemonSet and then the agent's RBAC; on a loaded node SIGTERM can
// come before the agent has read the deletion off its watch, and the
// lookup at stop is then refused. The watch, opened while access worked,
// still delivers it.
func (p *dsProbe) deletedWithin(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !p.deleted.Load() && p.watching.Load() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return p.deleted.Load()
}

// run GETs the DaemonSet and watches it from there, again at once after a
// watch that ran, backing off on p.backoff (zero: up to a minute,
// jittered) while the API does not answer or ends watches at once.
func (p *dsProbe) run(ctx context.Context) {
	b := p.backoff
	if b == (wait.Backoff{}) {
		b = retry.Backoff(time.Minute)
	}
	next := b.DelayFunc()
	for ctx.Err() == nil {
		var d time.Duration
		rv, err := p.get(ctx)
		if err != nil {
			d = next()
			p.log.Debug("cannot look up the DaemonSet", "err", err, "retry_in", d)
		} else {
			start := time.Now()
			err = p.watch(ctx, rv)
			if time.Since(start) < time.Second {
				// Refused, or ended at once: not a watch to reopen at once.
				d = next()
			} else {
				// A watch that ran until the API server (or the network)
				// ended it: the probe is blind until the next one is open.
				next = b.DelayFunc()
			}
			p.log.Debug("the DaemonSet watch ended", "err", err, "retry_in", d)
		}
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

func (p *dsProbe) get(ctx context.Context) (string, error) {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ds, err := p.daemonSets.DaemonSets(p.namespace).Get(gctx, p.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		p.see(true, "not found")
	case err == nil:
		p.see(ds.DeletionTimestamp != nil, "being deleted")
	default:
		return "", err
	}
	if !p.allowed.Swap(true) {
		p.log.Info("DaemonSet lookup allowed; watching it for a deletion", "daemonset", p.namespace+"/"+p.name)
	}
	if ds == nil {
		return "", nil
	}
	return ds.ResourceVersion, nil
}

func (p *dsProbe) watch(ctx context.Context, rv string) error {
	w, err := p.daemonSets.DaemonSets(p.namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector:   "metadata.name=" + p.name,
		ResourceVersion: rv,
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	p.opened.Add(1)
	p.watching.Store(true)
	defer p.watching.Store(false)
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Deleted:
			p.see(true, "deleted")
		case watch.Added, watch.Modified:
			if ds, ok := ev.Object.(*appsv1.DaemonSet); ok {
				p.see(ds.DeletionTimestamp != nil, "being deleted")
			}
		case watch.Error:
			return apierrors.FromObject(ev.Object)
		}
	}
	return nil
}

func (p *dsProbe) see(deleted bool, how string) {
	if p.deleted.Swap(deleted) != deleted && deleted {
		p.log.Info("the DaemonSet was deleted; uninstalling at stop", "daemonset", p.namespace+"/"+p.name, "how", how)
	}
}

// shouldUninstall decides what a stop means. In auto mode the release is
// being removed only when the API server says so: the DaemonSet is gone
// (404) or being deleted, at stop or, when the lookup at stop fails, as
// seen by the watch (seenDeleted, asked only then). A rolling update, drain or restart keeps
// everything in place so no pod starts unmeshed, and so does any doubt:
// 401, 403 (an RBAC change during a rollout), 5xx, timeouts, no API.
func shouldUninstall(daemonSets appsv1client.DaemonSetsGetter, cfg *config, seenDeleted func() bool) (bool, string) {
	switch cfg.uninstallMode {
	case "always":
		return true, "uninstall-mode=always"
	case "never":
		return false, "uninstall-mode=never"
	}
	if daemonSets == nil || cfg.namespace == "" {
		return false, "cannot look up the DaemonSet (no API access or namespace)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ds, err := daemonSets.DaemonSets(cfg.namespace).Get(ctx, cfg.daemonSetName, metav1.GetOptions{})
	if err != nil {
		return decide(err, seenDeleted, cfg.namespace+"/"+cfg.daemonSetName)
	}
	if ds.DeletionTimestamp != nil {
		return true, fmt.Sprintf("DaemonSet %s/%s is being deleted", cfg.namespace, cfg.daemonSetName)
	}
	return false, "DaemonSet still exists (restart, upgrade or drain)"
}

// decide maps a failed DaemonSet GET to uninstall or keep.
func decide(err error, seenDeleted func() bool, ds string) (bool, string) {
	switch {
	case apierrors.IsNotFound(err):
		return true, fmt.Sprintf("DaemonSet %s is gone", ds)
	case seenDeleted():
		return true, fmt.Sprintf("DaemonSet %s was deleted (seen while it could be watched; now: %v)", ds, err)
	}
	return false, fmt.Sprintf("cannot look up the DaemonSet, keeping the chain entry: %v", err)
}
