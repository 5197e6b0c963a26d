package contract

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// A promise is what a fixture pod's mesh promises for its traffic, read
// from the pod alone (its containers' kubelet identities and the mesh's
// documented annotations), not from the plugin's decision: the test
// compares the plugin's real behaviour with it.
type promise struct {
	mesh  string
	proxy member
	// apps: every container but the proxy and the mesh's own validators.
	apps []member
	// refused names the container ADD must refuse: it pins the proxy's
	// UID (or a root proxy's group) and is not a plain init container.
	refused string

	outboundPort, inboundPort, dnsPort int
	tproxy, captureDNS                 bool

	// Outbound: excluded ports and ranges, then included ports, then
	// included ranges (includeAll: every destination), in Istio's order
	// (istio.io/istio tools/istio-iptables/pkg/capture/run.go Run, the
	// version in hack/istio/go.mod); Linkerd has exclusions only.
	excludePorts, includePorts []int
	excludeRanges, includeIn   []netip.Prefix
	includeAll                 bool
	// alsoProbe: destinations worth probing that no outbound rule names
	// (Linkerd's skip-subnets skip inbound sources only).
	alsoProbe []netip.Prefix
	// Inbound: excluded ports, else every port (inAll) or inPorts.
	inExclude, inPorts []int
	inAll              bool
	// Interfaces whose traffic is never redirected, either way.
	ifaces []string
	// exemptUIDs: owners the pod's annotations exempt from the outbound
	// redirect (Kuma, Consul); dnsLocal: the one address whose DNS is
	// captured (Consul's local resolver), else every one is.
	exemptUIDs []uint32
	dnsLocal   netip.Addr
}

// member is one container and its process identity.
type member struct {
	name string
	id   Process
	// optOut: a plain init container running as the proxy's UID, the
	// meshes' documented way to let it reach the network (docs/topics.md).
	optOut bool
}

func (m member) String() string {
	return fmt.Sprintf("%s (uid %d gid %d groups %v)", m.name, m.id.UID, m.id.GID, m.id.Groups)
}

// loadFixture reads a fixture pod and its images.
func loadFixture(file string) (*corev1.Pod, map[string]Image, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	var kp corev1.Pod
	if err := yaml.Unmarshal(b, &kp); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	img, err := ImageIDs(kp.Annotations)
	return &kp, img, err
}

// promised reads pod's promise.
func promised(pod *corev1.Pod, img map[string]Image) (*promise, error) {
	w := &promise{}
	for _, name := range []string{mesh.Istio, mesh.Linkerd, mesh.Kuma, mesh.Consul} {
		d, _ := mesh.Defaults(name)
		if container(pod, d.Sidecar) != nil {
			w.mesh, w.proxy.name = name, d.Sidecar
			w.outboundPort, w.inboundPort, w.dnsPort = d.OutboundPort, d.InboundPort, d.DNSPort
		}
	}
	if w.mesh == "" {
		return nil, fmt.Errorf("pod %s/%s has no proxy container", pod.Namespace, pod.Name)
	}
	var err error
	if w.proxy.id, err = Kubelet(pod, w.proxy.name, img[w.proxy.name]); err != nil {
		return nil, err
	}
	for i, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name == w.proxy.name || mesh.MeshOwned(c.Name) {
				continue
			}
			m := member{name: c.Name}
			if m.id, err = Kubelet(pod, c.Name, img[c.Name]); err != nil {
				return nil, err
			}
			plainInit := i == 0 && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways)
			root := w.proxy.id.UID == 0
			switch {
			case plainInit && m.id.UID == w.proxy.id.UID && !root:
				m.optOut = true
			case !root && m.id.UIDPinned && m.id.UID == w.proxy.id.UID,
				root && m.id.GIDPinned && m.id.GID == w.proxy.id.GID:
				if w.refused == "" {
					w.refused = c.Name
				}
			}
			w.apps = append(w.apps, m)
		}
	}
	switch w.mesh {
	case mesh.Istio:
		err = w.istio(pod)
	case mesh.Linkerd:
		err = w.linkerd(pod)
	case mesh.Kuma:
		err = w.kuma(pod)
	case mesh.Consul:
		err = w.consul(pod)
	}
	// A container the pod's own annotations exempt reaches its
	// destinations directly, like the plain-init opt-out.
	for i := range w.apps {
		if slices.Contains(w.exemptUIDs, w.apps[i].id.UID) {
			w.apps[i].optOut = true
		}
	}
	return w, err
}

// istio reads the traffic.sidecar.istio.io annotations and the proxy's
// DNS capture setting, with the defaults of Istio's injector values.
func (w *promise) istio(pod *corev1.Pod) error {
	a := pod.Annotations
	var err error
	get := func(key, def string) string {
		if v, ok := a[key]; ok {
			return v
		}
		return def
	}
	w.tproxy = get("sidecar.istio.io/interceptionMode", "REDIRECT") == "TPROXY"
	// Istio's CNI plugin excludes the status port when the annotation is
	// absent (cni/pkg/plugin/sidecar_redirect.go NewRedirect).
	if w.excludePorts, err = ports(get("traffic.sidecar.istio.io/excludeOutboundPorts", "15020")); err != nil {
		return err
	}
	if w.includePorts, err = ports(get("traffic.sidecar.istio.io/includeOutboundPorts", "")); err != nil {
		return err
	}
	if w.excludeRanges, err = prefixes(get("traffic.sidecar.istio.io/excludeOutboundIPRanges", "")); err != nil {
		return err
	}
	if inc := get("traffic.sidecar.istio.io/includeOutboundIPRanges", "*"); inc == "*" {
		w.includeAll = true
	} else if w.includeIn, err = prefixes(inc); err != nil {
		return err
	}
	if w.inExclude, err = ports(get("traffic.sidecar.istio.io/excludeInboundPorts", "")); err != nil {
		return err
	}
	if inc := get("traffic.sidecar.istio.io/includeInboundPorts", "*"); inc == "*" {
		w.inAll = true
	} else if w.inPorts, err = ports(inc); err != nil {
		return err
	}
	w.ifaces = list(get("traffic.sidecar.istio.io/excludeInterfaces", ""))
	for _, e := range container(pod, w.proxy.name).Env {
		if e.Name == "ISTIO_META_DNS_CAPTURE" {
			w.captureDNS, _ = strconv.ParseBool(e.Value)
		}
	}
	return nil
}

// linkerd reads the config.linkerd.io skip annotations (linkerd.io
// reference/proxy-configuration): skipped ports are never redirected;
// skip-subnets skips inbound connections from those sources only, and
// outbound traffic to them still goes to the proxy (linkerd2-proxy-init
// pkg/iptables/iptables.go: addRulesForIgnoredSubnets is called for the
// inbound chain only, in addIncomingTrafficRules).
func (w *promise) linkerd(pod *corev1.Pod) error {
	a := pod.Annotations
	var err error
	if w.excludePorts, err = ports(a[mesh.LinkerdSkipOutboundPorts]); err != nil {
		return err
	}
	if w.inExclude, err = ports(a[mesh.LinkerdSkipInboundPorts]); err != nil {
		return err
	}
	if w.alsoProbe, err = prefixes(a[mesh.LinkerdSkipSubnets]); err != nil {
		return err
	}
	w.includeAll, w.inAll = true, true
	return nil
}

// kuma reads Kuma's injector config annotation (kumahq/kuma
// pkg/transparentproxy/config/config.go keys), else its per-field
// annotations with kuma-cni's defaults (app/cni/pkg/cni/annotations_linux.go
// at v2.14.3). mesh-cni redirects IPv6 in ipFamilyMode ipv4 too.
func (w *promise) kuma(pod *corev1.Pod) error {
	a := pod.Annotations
	w.includeAll, w.inAll = true, true
	if raw := a["traffic.kuma.io/transparent-proxy-config"]; raw != "" {
		var c struct {
			Redirect struct {
				Inbound, Outbound struct {
					Port                *int
					ExcludePorts        []int
					ExcludePortsForIPs  []string
					ExcludePortsForUIDs []string
				}
				DNS struct {
					Enabled bool
					Port    int
				}
			}
		}
		if err := yaml.Unmarshal([]byte(raw), &c); err != nil {
			return err
		}
		r := c.Redirect
		if r.Inbound.Port != nil {
			w.inboundPort = *r.Inbound.Port
		}
		if r.Outbound.Port != nil {
			w.outboundPort = *r.Outbound.Port
		}
		w.inExclude, w.excludePorts = r.Inbound.ExcludePorts, r.Outbound.ExcludePorts
		w.captureDNS = r.DNS.Enabled
		if r.DNS.Port != 0 {
			w.dnsPort = r.DNS.Port
		}
		var err error
		if w.excludeRanges, err = prefixes(strings.Join(r.Outbound.ExcludePortsForIPs, ",")); err != nil {
			return err
		}
		return w.exempt(r.Outbound.ExcludePortsForUIDs)
	}
	get := func(key, def string) string {
		if v, ok := a[key]; ok {
			return v
		}
		return def
	}
	var err error
	if w.inExclude, err = ports(get("traffic.kuma.io/exclude-inbound-ports", "9901") + "," + get("kuma.io/application-probe-proxy-port", "9001")); err != nil {
		return err
	}
	if w.excludePorts, err = ports(get("traffic.kuma.io/exclude-outbound-ports", "9901")); err != nil {
		return err
	}
	if w.excludeRanges, err = prefixes(a["traffic.kuma.io/exclude-outbound-ips"]); err != nil {
		return err
	}
	for key, dst := range map[string]*int{"kuma.io/transparent-proxying-inbound-port": &w.inboundPort,
		"kuma.io/transparent-proxying-outbound-port": &w.outboundPort, "kuma.io/builtin-dns-port": &w.dnsPort} {
		if v, ok := a[key]; ok {
			if *dst, err = strconv.Atoi(v); err != nil {
				return err
			}
		}
	}
	w.captureDNS = a["kuma.io/builtin-dns"] == "enabled" || a["kuma.io/builtin-dns"] == "true"
	return w.exempt(list(strings.ReplaceAll(a["traffic.kuma.io/exclude-outbound-ports-for-uids"], ";", ",")))
}

// exempt reads Kuma's excludePortsForUIDs entries of the plain form the
// fixtures use, "uid" (every protocol and port).
func (w *promise) exempt(entries []string) error {
	for _, e := range entries {
		uid, err := strconv.ParseUint(e, 10, 32)
		if err != nil {
			return fmt.Errorf("exclusion %q: the fixtures use a bare UID", e)
		}
		w.exemptUIDs = append(w.exemptUIDs, uint32(uid))
	}
	return nil
}

// consul reads the injector's redirect-traffic-config (the JSON of
// iptables.Config in github.com/hashicorp/consul/sdk v0.18.1).
func (w *promise) consul(pod *corev1.Pod) error {
	var c struct {
		ConsulDNSIP                                                     string
		ConsulDNSPort, ProxyInboundPort, ProxyOutboundPort              int
		ExcludeInboundPorts, ExcludeOutboundPorts, ExcludeOutboundCIDRs []string
		ExcludeUIDs                                                     []string
	}
	if err := json.Unmarshal([]byte(pod.Annotations["consul.hashicorp.com/redirect-traffic-config"]), &c); err != nil {
		return err
	}
	w.includeAll, w.inAll = true, true
	w.inboundPort, w.outboundPort = c.ProxyInboundPort, c.ProxyOutboundPort
	var err error
	if w.inExclude, err = ports(strings.Join(c.ExcludeInboundPorts, ",")); err != nil {
		return err
	}
	if w.excludePorts, err = ports(strings.Join(c.ExcludeOutboundPorts, ",")); err != nil {
		return err
	}
	if w.excludeRanges, err = prefixes(strings.Join(c.ExcludeOutboundCIDRs, ",")); err != nil {
		return err
	}
	if c.ConsulDNSPort != 0 {
		w.dnsPort = c.ConsulDNSPort
		if w.dnsLocal, err = netip.ParseAddr(c.ConsulDNSIP); err != nil {
			return err
		}
	}
	return w.exempt(c.ExcludeUIDs)
}

// redirectedOut: does an app's connection to addr:port go to the proxy?
func (w *promise) redirectedOut(addr netip.Addr, port int) bool {
	in := func(ps []netip.Prefix) bool {
		return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(addr) })
	}
	switch {
	case slices.Contains(w.excludePorts, port), in(w.excludeRanges):
		return false
	case slices.Contains(w.includePorts, port):
		return true
	}
	return w.includeAll || in(w.includeIn)
}

// redirectedIn: does a connection to the pod's port go to the proxy?
func (w *promise) redirectedIn(port int) bool {
	if slices.Contains(w.inExclude, port) {
		return false
	}
	return w.inAll || slices.Contains(w.inPorts, port)
}

func list(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// ports reads "80,8000-8100" as the first port of each item.
func ports(v string) ([]int, error) {
	var out []int
	for _, f := range list(v) {
		lo, _, _ := strings.Cut(f, "-")
		p, err := strconv.Atoi(lo)
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("port list %q", v)
		}
		out = append(out, p)
	}
	return out, nil
}

func prefixes(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range list(v) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("CIDR list %q: %w", v, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// host is an address inside p: its first host, or its only address.
func host(p netip.Prefix) netip.Addr {
	if p.IsSingleIP() {
		return p.Addr()
	}
	return p.Addr().Next()
}
