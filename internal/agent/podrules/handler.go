package podrules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mesh-cni/mesh-cni/internal/agent/install"
	"github.com/mesh-cni/mesh-cni/internal/backend"
	"github.com/mesh-cni/mesh-cni/internal/backend/finding"
	"github.com/mesh-cni/mesh-cni/internal/ctl/explain"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// Timeout bounds one answer: finding the netns and reading its rules take
// milliseconds on a full node.
const Timeout = 10 * time.Second

// Handler serves finding.Path. The pod comes from the API (one GET) and
// must be on this node, and the rules from the chain entry the node's agent
// runs: a caller names a pod, never a netns, an IP or a rule.
// The pod's UID must be given too, and a wrong one is answered as an
// unknown pod: only someone who can read the pod from the API knows it,
// so the answer tells a caller nothing about a pod it could not read.
type Handler struct {
	Node string
	// Pod returns the pod namespace/name, or nil when there is none.
	Pod func(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// Entry is the resolved chain entry the node's agent runs (nil: not
	// ready).
	Entry func(ctx context.Context) ([]byte, error)
	// NetnsDir is the runtime's netns dir, mounted read-only.
	NetnsDir string

	busy chan struct{}
}

// NewHandler returns h ready to serve: one answer at a time.
func NewHandler(h Handler) *Handler {
	h.busy = make(chan struct{}, 1)
	return &h
}

var uidRE = regexp.MustCompile(`^[0-9a-fA-F-]{1,64}$`)

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != finding.Path {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "only GET", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	ns, name, uid := q.Get("namespace"), q.Get("name"), q.Get("uid")
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		http.Error(w, fmt.Sprintf("namespace %.80q: %s", ns, errs[0]), http.StatusBadRequest)
		return
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		http.Error(w, fmt.Sprintf("name %.80q: %s", name, errs[0]), http.StatusBadRequest)
		return
	}
	if !uidRE.MatchString(uid) {
		http.Error(w, fmt.Sprintf("uid %.80q: want the pod's metadata.uid", uid), http.StatusBadRequest)
		return
	}
	select {
	case h.busy <- struct{}{}:
		defer func() { <-h.busy }()
	default:
		http.Error(w, "another pod-rules answer is being computed; try again", http.StatusTooManyRequests)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), Timeout)
	defer cancel()
	rep, code, err := h.answer(ctx, ns, name, uid)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rep) // the client went away
}

func (h *Handler) answer(ctx context.Context, ns, name, uid string) (*finding.Report, int, error) {
	pod, err := h.Pod(ctx, ns, name)
	if err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("get pod %s/%s: %w", ns, name, err)
	}
	if pod == nil || string(pod.UID) != uid || pod.Spec.NodeName != h.Node {
		return nil, http.StatusNotFound, fmt.Errorf("no pod %s/%s with uid %s on node %s", ns, name, uid, h.Node)
	}
	rep := &finding.Report{Pod: ns + "/" + name, Node: h.Node, Findings: []finding.Finding{}}
	if pod.Spec.HostNetwork {
		rep.Decision, rep.Reason = "skip", "hostNetwork: no network namespace of its own, the plugin is not run"
		return rep, http.StatusOK, nil
	}
	entry, err := h.Entry(ctx)
	if err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("the chain entry of node %s: %w", h.Node, err)
	}
	if len(entry) == 0 {
		return nil, http.StatusServiceUnavailable, errors.New("the agent is not ready: no chain entry yet")
	}
	var ips []netip.Addr
	for _, ip := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			ips = append(ips, a.Unmap())
		}
	}
	if len(ips) == 0 {
		return nil, http.StatusConflict, fmt.Errorf("pod %s/%s has no IP yet", ns, name)
	}
	manifest, err := json.Marshal(pod)
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	o := explain.NewOptions()
	o.PodManifest, o.PodSource, o.Entry, o.EntrySource = manifest, "pod "+ns+"/"+name, entry, "node "+h.Node
	res, rs, err := explain.Rules(o)
	if err != nil {
		return nil, http.StatusUnprocessableEntity, fmt.Errorf("what ADD writes for pod %s/%s: %w", ns, name, err)
	}
	rep.Decision, rep.Reason = res.Decision, res.Reason
	path, scanned, err := FindNetns(ctx, h.NetnsDir, ips)
	rep.Scanned = scanned
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, errNotFound) {
			code = http.StatusNotFound
		}
		return nil, code, fmt.Errorf("pod %s/%s (%v): %w", ns, name, ips, err)
	}
	rep.Netns = path
	if res.Decision != "redirect" {
		// Nothing expected: report only what of ours is there anyway.
		rs.Families = familiesOf(ips)
	}
	used, fs, err := backend.Report(install.EntryBackend(entry), path, rs)
	if err != nil {
		return nil, http.StatusInternalServerError, fmt.Errorf("read the rules in %s: %w", path, err)
	}
	rep.Backend = used
	if len(fs) > finding.MaxFindings {
		fs, rep.Truncated = fs[:finding.MaxFindings], true
	}
	rep.Findings = append(rep.Findings, fs...)
	return rep, http.StatusOK, nil
}

// familiesOf are the families of the pod's IPs.
func familiesOf(ips []netip.Addr) []rules.Family {
	var fs []rules.Family
	for _, f := range []rules.Family{rules.IPv4, rules.IPv6} {
		for _, a := range ips {
			if a.Is4() == (f == rules.IPv4) {
				fs = append(fs, f)
				break
			}
		}
	}
	return fs
}
