package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/lookup/podget"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// errPodUnknown: the source answered, but does not know the pod.
var errPodUnknown = podget.ErrNotFound

// lookupPod fetches the pod's containers and annotations when the runtime's
// annotations cannot decide. First the agent's cache, then one GET through
// the agent's kubeconfig (by mesh-cni-podget, retried once when its
// connection fails before any answer), both within timeout in total. The
// agent gets at most half the budget so a hung agent still leaves time for
// the API.
//
// uid is the runtime's K8S_POD_UID: every answer must be that pod. When the
// agent answers with an earlier pod of the same name (its watch lags behind
// a recreated pod), it is asked again while its half lasts (it waits for
// its watch on each ask), then the API is; an answer that is still another
// pod fails the lookup, so the pod is tried again later.
func lookupPod(ctx context.Context, agentSocket, kubeconfig, ns, name, uid string, timeout time.Duration) (mesh.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	actx, acancel := context.WithTimeout(ctx, timeout/2)
	pod, aerr := podFromAgent(actx, agentSocket, ns, name, uid)
	for errors.Is(aerr, podget.ErrOtherUID) {
		stale := aerr
		select {
		case <-time.After(reaskPause):
		case <-actx.Done():
		}
		if actx.Err() != nil {
			break
		}
		pod, aerr = podFromAgent(actx, agentSocket, ns, name, uid)
		if aerr != nil && !errors.Is(aerr, podget.ErrOtherUID) {
			// Keep what the agent said before: an earlier pod says more
			// than the deadline that cut the next ask.
			aerr = fmt.Errorf("%w (asked again: %v)", stale, aerr) //nolint:errorlint // the second error is context, not a cause to match
			break
		}
	}
	acancel()
	if aerr == nil {
		return pod, nil
	}
	pod, kerr := podFromAPI(ctx, kubeconfig, ns, name, uid)
	if kerr == nil {
		return pod, nil
	}
	return mesh.Pod{}, fmt.Errorf("agent socket: %v; API: %v", aerr, kerr) //nolint:errorlint // both failed: neither is a cause to match
}

// reaskPause spaces the asks of an agent whose cache holds an earlier pod
// of the name. A current agent waits for its watch on each ask, so this
// only keeps an older one, which answers at once, from being flooded.
const reaskPause = 100 * time.Millisecond

// podgetPath is where mesh-cni-podget is: beside the running plugin. Tests
// that call lookupPod in-process point it at the built helper.
var podgetPath = func() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find %s: %w", podget.Binary, err)
	}
	return filepath.Join(filepath.Dir(exe), podget.Binary), nil
}

// podFromAPI GETs the pod from the API server through mesh-cni-podget, a
// separate binary so this one links no TLS. A missing helper is an error,
// so the pod fails closed.
func podFromAPI(ctx context.Context, kubeconfig, ns, name, uid string) (mesh.Pod, error) {
	bin, err := podgetPath()
	if err != nil {
		return mesh.Pod{}, err
	}
	return podget.Run(ctx, bin, kubeconfig, ns, name, uid)
}

// podFromAgent asks the node agent's pod cache: GET
// /v1/pods/{ns}/{name}?uid={uid} over HTTP on a unix socket, answered with
// mesh.Pod JSON (404: unknown), checked against uid (podget.Check).
func podFromAgent(ctx context.Context, socket, ns, name, uid string) (mesh.Pod, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return mesh.Pod{}, err
	}
	path := "/v1/pods/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
	if uid != "" {
		path += "?uid=" + url.QueryEscape(uid)
	}
	body, err := podget.GetOK(ctx, conn, "agent", path, nil)
	if err != nil {
		return mesh.Pod{}, err
	}
	var pod mesh.Pod
	if err := json.Unmarshal(body, &pod); err != nil {
		return mesh.Pod{}, fmt.Errorf("decode pod from agent: %w", err)
	}
	if err := podget.Check(pod, ns, name, uid); err != nil {
		return mesh.Pod{}, fmt.Errorf("agent: %w", err)
	}
	return pod, nil
}
