// Package podget is how the plugin fetches a pod when the runtime's
// annotations cannot decide, without linking TLS: the small HTTP/1.1 GET
// the plugin uses on the agent's unix socket, and the protocol of
// mesh-cni-podget, the helper binary beside the plugin that does the
// fallback GET through the API server (internal/lookup/apiget holds that GET).
//
// The plugin runs the helper as
//
//	mesh-cni-podget --kubeconfig FILE --namespace NS --name NAME --timeout D
//
// and reads one Result as JSON from its stdout. The helper exits 0
// whenever it printed a Result (a failed GET included) and 2 on a bad
// command line.
package podget

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/node"
)

// Binary is the helper's file name; the agent installs it beside the
// plugin in the host's CNI bin dir.
const Binary = node.HelperBinary

// Result is what the helper prints: the pod, or why there is none.
type Result struct {
	Pod      *mesh.Pod `json:"pod,omitempty"`
	NotFound bool      `json:"notFound,omitempty"` // the API server answered 404
	Error    string    `json:"error,omitempty"`
}

// Err is the Result as the caller sees it: the pod, ErrNotFound, or the
// helper's error text.
func (r Result) Err() error {
	switch {
	case r.NotFound:
		return ErrNotFound
	case r.Error != "":
		return errors.New(r.Error)
	case r.Pod == nil:
		return errors.New("answer holds neither a pod nor an error")
	}
	return nil
}

// maxOut caps what Run reads from the helper: a pod plus JSON framing.
const maxOut = maxBody + 64<<10

// ErrOtherUID: the source answered for a pod of the asked name with
// another UID than the runtime's: an earlier pod of that name (a
// StatefulSet pod recreated), whose annotations say nothing of this one.
var ErrOtherUID = errors.New("the pod of that name has another UID")

// Check says whether pod is the pod the runtime named: namespace, name
// and, when the runtime passed one (K8S_POD_UID), UID. An answer without a
// UID cannot tell, so it is refused as well (but is not ErrOtherUID).
func Check(pod mesh.Pod, ns, name, uid string) error {
	if pod.Namespace != ns || pod.Name != name {
		return fmt.Errorf("answered for pod %s/%s, asked for %s/%s", pod.Namespace, pod.Name, ns, name)
	}
	switch {
	case uid == "" || pod.UID == uid:
		return nil
	case pod.UID == "":
		return fmt.Errorf("answer for pod %s/%s carries no UID; the runtime's is %s", ns, name, uid)
	}
	return fmt.Errorf("%w: pod %s/%s is %s, the runtime's is %s", ErrOtherUID, ns, name, pod.UID, uid)
}

// Run execs the helper at bin for the pod ns/name and returns the pod,
// checked against uid (Check). The helper gets ctx's remaining time less
// a small margin, so it can answer with its own error before ctx ends; at
// ctx's end it is killed.
func Run(ctx context.Context, bin, kubeconfig, ns, name, uid string) (mesh.Pod, error) {
	if _, err := os.Stat(bin); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return mesh.Pod{}, fmt.Errorf("%s is missing: it must sit beside the mesh-cni binary (the mesh-cni agent installs both)", bin)
		}
		return mesh.Pod{}, fmt.Errorf("%s: %w", Binary, err)
	}
	budget := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		budget = time.Until(dl)
		budget -= min(budget/20, 50*time.Millisecond)
		if budget <= 0 {
			return mesh.Pod{}, fmt.Errorf("%w (no time left to run %s)", context.DeadlineExceeded, Binary)
		}
	}
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig", kubeconfig, "--namespace", ns, "--name", name, "--timeout", budget.String())
	var stdout, stderr capped
	stdout.max, stderr.max = maxOut, 4<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 100 * time.Millisecond
	err := cmd.Run()
	if ctx.Err() != nil && err != nil {
		return mesh.Pod{}, fmt.Errorf("%w (%s stopped at the deadline)", ctx.Err(), Binary)
	}
	if err != nil {
		return mesh.Pod{}, fmt.Errorf("%s: %w: %s", Binary, err, strings.TrimSpace(stderr.buf.String()))
	}
	if stdout.over {
		return mesh.Pod{}, fmt.Errorf("%s: answer larger than %d bytes", Binary, maxOut)
	}
	var res Result
	if err := json.Unmarshal(stdout.buf.Bytes(), &res); err != nil {
		return mesh.Pod{}, fmt.Errorf("%s: undecodable answer %q: %w", Binary, Trim(stdout.buf.Bytes()), err)
	}
	if err := res.Err(); err != nil {
		return mesh.Pod{}, err
	}
	if err := Check(*res.Pod, ns, name, uid); err != nil {
		return mesh.Pod{}, fmt.Errorf("%s: %w", Binary, err)
	}
	return *res.Pod, nil
}

// capped keeps the first max bytes written to it and drops the rest. (Not
// an embedded bytes.Buffer: its ReadFrom would bypass the cap.)
type capped struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); len(p) > room {
		c.over = true
		c.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.buf.Write(p)
}
