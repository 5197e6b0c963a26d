package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/mesh-cni/mesh-cni/pkg/mesh"
	"github.com/mesh-cni/mesh-cni/pkg/podget"
)

// errPodUnknown: the source answered, but does not know the pod.
var errPodUnknown = podget.ErrNotFound

// lookupPod fetches the pod's containers and annotations when the runtime's
// annotations cannot decide. One try at the agent's cache, then one GET
// through the agent's kubeconfig (by mesh-cni-podget, retried once when
// its connection fails before any answer), both within timeout in total.
// The agent gets at most half the budget so a hung agent still leaves time
// for the API.
func lookupPod(ctx context.Context, agentSocket, kubeconfig, ns, name string, timeout time.Duration) (mesh.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	actx, acancel := context.WithTimeout(ctx, timeout/2)
	pod, aerr := podFromAgent(actx, agentSocket, ns, name)
	acancel()
	if aerr == nil {
		return pod, nil
	}
	pod, kerr := podFromAPI(ctx, kubeconfig, ns, name)
	if kerr == nil {
		return pod, nil
	}
	return mesh.Pod{}, fmt.Errorf("agent socket: %v; API: %v", aerr, kerr)
}

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
func podFromAPI(ctx context.Context, kubeconfig, ns, name string) (mesh.Pod, error) {
	bin, err := podgetPath()
	if err != nil {
		return mesh.Pod{}, err
	}
	return podget.Run(ctx, bin, kubeconfig, ns, name)
}

// podFromAgent asks the node agent's pod cache: GET /v1/pods/{ns}/{name}
// over HTTP on a unix socket, answered with mesh.Pod JSON (404: unknown).
func podFromAgent(ctx context.Context, socket, ns, name string) (mesh.Pod, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return mesh.Pod{}, err
	}
	body, err := podget.GetOK(ctx, conn, "agent", "/v1/pods/"+url.PathEscape(ns)+"/"+url.PathEscape(name), nil)
	if err != nil {
		return mesh.Pod{}, err
	}
	var pod mesh.Pod
	if err := json.Unmarshal(body, &pod); err != nil {
		return mesh.Pod{}, fmt.Errorf("decode pod from agent: %w", err)
	}
	if pod.Namespace != ns || pod.Name != name {
		return mesh.Pod{}, fmt.Errorf("agent answered for pod %s/%s, asked for %s/%s", pod.Namespace, pod.Name, ns, name)
	}
	return pod, nil
}
