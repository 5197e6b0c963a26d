package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/mesh-cni/mesh-cni/pkg/mesh"
)

// errPodUnknown: the source answered, but does not know the pod.
var errPodUnknown = errors.New("pod not found")

// lookupPod fetches the pod's containers and annotations when the runtime's
// annotations cannot decide. One try at the agent's cache, then one GET
// through the agent's kubeconfig, both within timeout in total. The agent
// gets at most half the budget so a hung agent still leaves time for the API.
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
	var conn *net.OpError
	if kerr != nil && errors.As(kerr, &conn) && ctx.Err() == nil {
		// The connection failed before any answer (a busy API server
		// resets handshakes): one more try, within the same budget.
		pod, kerr = podFromAPI(ctx, kubeconfig, ns, name)
	}
	if kerr == nil {
		return pod, nil
	}
	return mesh.Pod{}, fmt.Errorf("agent socket: %v; API: %v", aerr, kerr)
}

// podFromAgent asks the node agent's pod cache: GET /v1/pods/{ns}/{name}
// over HTTP on a unix socket, answered with mesh.Pod JSON (404: unknown).
func podFromAgent(ctx context.Context, socket, ns, name string) (mesh.Pod, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return mesh.Pod{}, err
	}
	body, err := getOK(ctx, conn, "agent", "/v1/pods/"+url.PathEscape(ns)+"/"+url.PathEscape(name), nil)
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

// getOK is httpGet that only accepts a 200.
func getOK(ctx context.Context, conn net.Conn, host, path string, header map[string]string) ([]byte, error) {
	code, body, err := httpGet(ctx, conn, host, path, header)
	switch {
	case err != nil:
		return nil, err
	case code == 404:
		return nil, errPodUnknown
	case code != 200:
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", path, code, trim(body))
	}
	return body, nil
}
