package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	listers "k8s.io/client-go/listers/core/v1"
)

type reconciler struct {
	nodeName  string
	confPath  string
	lister    listers.NodeLister
	written   []byte // what we last wrote; rewritten when the wanted config differs
	rewrite   time.Duration
	lastWrite time.Time
}

// RewriteLabel on a node asks meshnet to rewrite that node's conflist this often.
const RewriteLabel = "meshnet.mesh-cni.io/rewrite-interval"

// CNIVersionLabel on a node sets the cniVersion of that node's conflist
// (default 0.4.0): 1.1.0 makes the runtime send STATUS to every plugin of
// the list, ours included.
const CNIVersionLabel = "meshnet.mesh-cni.io/cni-version"

// cniVersions are the list versions meshnet writes: the upstream plugins
// of the node image (v1.9) accept each.
var cniVersions = map[string]bool{"0.3.1": true, "0.4.0": true, "1.0.0": true, "1.1.0": true}

func (r *reconciler) rewriteDue() bool {
	every := r.rewrite
	if n, err := r.lister.Get(r.nodeName); err == nil {
		if v, ok := n.Labels[RewriteLabel]; ok {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return false
			}
			every = d
		}
	}
	return every > 0 && time.Since(r.lastWrite) >= every
}

func (r *reconciler) reconcile(force bool) {
	all, err := r.lister.List(labels.Everything())
	if err != nil {
		log.Printf("listing nodes: %v", err)
		return
	}
	for _, n := range all {
		if n.Name == r.nodeName {
			r.writeConf(n, force)
			continue
		}
		routeNode(n)
	}
}

func (r *reconciler) writeConf(n *v1.Node, force bool) {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	if len(cidrs) == 0 {
		log.Printf("node %s has no pod CIDR yet", n.Name)
		return
	}
	version := "0.4.0"
	if v, ok := n.Labels[CNIVersionLabel]; ok {
		if !cniVersions[v] {
			log.Printf("node %s: label %s=%q is not a version meshnet writes", n.Name, CNIVersionLabel, v)
			return
		}
		version = v
	}
	want, err := conflist(cidrs, version)
	if err != nil {
		log.Printf("building conflist: %v", err)
		return
	}
	if !force && bytes.Equal(want, r.written) {
		return
	}
	if err := writeAtomic(r.confPath, want); err != nil {
		log.Printf("writing %s: %v", r.confPath, err)
		return
	}
	r.written = want
	r.lastWrite = time.Now()
	log.Printf("wrote %s for %v", r.confPath, cidrs)
}

// conflist is kindnet's shape: ptp + host-local over the node's pod CIDRs + portmap.
func conflist(cidrs []string, version string) ([]byte, error) {
	var ranges [][]map[string]string
	var routes []map[string]string
	for _, c := range cidrs {
		ip, _, err := net.ParseCIDR(c)
		if err != nil {
			return nil, fmt.Errorf("pod CIDR %q: %w", c, err)
		}
		ranges = append(ranges, []map[string]string{{"subnet": c}})
		dst := "0.0.0.0/0"
		if ip.To4() == nil {
			dst = "::/0"
		}
		routes = append(routes, map[string]string{"dst": dst})
	}
	conf := map[string]any{
		"cniVersion": version,
		"name":       "meshnet",
		"plugins": []any{
			map[string]any{
				"type":   "ptp",
				"ipMasq": false,
				"mtu":    1500,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": "/run/cni-ipam-state",
					"routes":  routes,
					"ranges":  ranges,
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	return append(b, '\n'), err
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".meshnet-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// routeNode routes each of another node's pod CIDRs via that node's IP of the same family.
func routeNode(n *v1.Node) {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		_, dst, err := net.ParseCIDR(c)
		if err != nil {
			continue
		}
		gw := nodeIP(n, dst.IP.To4() != nil)
		if gw == nil {
			continue
		}
		route := &netlink.Route{Dst: dst, Gw: gw}
		if err := netlink.RouteReplace(route); err != nil {
			log.Printf("route %s via %s (node %s): %v", dst, gw, n.Name, err)
		}
	}
}

func nodeIP(n *v1.Node, v4 bool) net.IP {
	for _, a := range n.Status.Addresses {
		if a.Type != v1.NodeInternalIP {
			continue
		}
		ip := net.ParseIP(a.Address)
		if ip != nil && (ip.To4() != nil) == v4 {
			return ip
		}
	}
	return nil
}
