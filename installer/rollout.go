package main

// The agents-ready subcommand's check: whether the agent DaemonSet runs an
// updated, ready agent on every node it schedules on, from the DaemonSet's
// status alone: one `get` of one object, the only permission the chart's
// `helm test` grants. It uses the typed apps/v1 client only, as the agent
// does.

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
)

// rolloutPollEvery is how often waitRollout reads the DaemonSet again.
const rolloutPollEvery = 2 * time.Second

// waitRollout checks the DaemonSet until every node runs an updated, ready agent,
// for at most wait, each request bounded by timeout; progress gets each
// summary that is not ready yet. A refused or missing DaemonSet fails at
// once: waiting cannot change that. The error is the last reason.
func waitRollout(ctx context.Context, c appsv1client.DaemonSetsGetter, ns, name string, timeout, wait time.Duration, progress func(string)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(rolloutPollEvery)
	defer tick.Stop()
	for {
		rctx, rcancel := context.WithTimeout(ctx, timeout)
		sum, err := checkRollout(rctx, c, ns, name)
		rcancel()
		if err == nil {
			return sum, nil
		}
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsUnauthorized(err) {
			return sum, err
		}
		if sum != "" && progress != nil {
			progress(sum)
		}
		select {
		case <-ctx.Done():
			return sum, fmt.Errorf("not ready after %v: %w", wait, err)
		case <-tick.C:
		}
	}
}

// checkRollout gets DaemonSet ns/name and returns rolloutStatus of it.
func checkRollout(ctx context.Context, c appsv1client.DaemonSetsGetter, ns, name string) (string, error) {
	ds, err := c.DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("get DaemonSet %s/%s: %w", ns, name, err)
	}
	return rolloutStatus(ds)
}

// rolloutStatus summarises the DaemonSet's status, and returns an error unless
// the controller has seen its current spec and every node it schedules on
// (at least one) runs an updated agent that is ready.
func rolloutStatus(ds *appsv1.DaemonSet) (string, error) {
	st := ds.Status
	sum := fmt.Sprintf("DaemonSet %s/%s: %d desired, %d updated, %d ready",
		ds.Namespace, ds.Name, st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberReady)
	switch {
	case st.ObservedGeneration < ds.Generation:
		return sum, fmt.Errorf("%s: status is of generation %d, the spec is at %d (the controller has not caught up)",
			sum, st.ObservedGeneration, ds.Generation)
	case st.DesiredNumberScheduled == 0:
		return sum, fmt.Errorf("%s: no node to run an agent on (check the DaemonSet's nodeSelector, affinity and tolerations)", sum)
	case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
		return sum, fmt.Errorf("%s: %d nodes still run an agent of an earlier revision", sum,
			st.DesiredNumberScheduled-st.UpdatedNumberScheduled)
	case st.NumberReady < st.DesiredNumberScheduled:
		return sum, fmt.Errorf("%s: %d nodes have no ready agent", sum, st.DesiredNumberScheduled-st.NumberReady)
	}
	return sum, nil
}
