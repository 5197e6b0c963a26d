package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
	"github.com/mesh-cni/mesh-cni/internal/node"
	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// podID reads the pod's namespace and name from CNI_ARGS. Without them the
// plugin cannot tell which pod it is wiring, so it refuses rather than
// guess.
func podID(cniArgs string) (namespace, name string, err error) {
	a, err := config.ParseArgs(cniArgs)
	if err != nil {
		return "", "", err
	}
	namespace, name = string(a.K8S_POD_NAMESPACE), string(a.K8S_POD_NAME)
	if namespace == "" || name == "" {
		return "", "", types.NewError(types.ErrInvalidEnvironmentVariables,
			"CNI_ARGS lacks K8S_POD_NAMESPACE or K8S_POD_NAME", fmt.Sprintf("CNI_ARGS=%q", cniArgs))
	}
	return namespace, name, nil
}

// podUID is the pod's UID from CNI_ARGS, when the runtime passes it.
func podUID(cniArgs string) string {
	a, err := config.ParseArgs(cniArgs)
	if err != nil {
		return ""
	}
	return string(a.K8S_POD_UID)
}

// podFamilies lists the address families the pod has addresses in: from
// prevResult when chained, else from the addresses in its netns.
func podFamilies(res *current.Result, netns string) ([]rules.Family, error) {
	var ips []net.IP
	if res != nil {
		for _, ip := range res.IPs {
			ips = append(ips, ip.Address.IP)
		}
	} else {
		err := ns.WithNetNSPath(netns, func(ns.NetNS) error {
			addrs, err := net.InterfaceAddrs()
			if err != nil {
				return err
			}
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					ips = append(ips, n.IP)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list addresses in %s: %w", netns, err)
		}
	}
	var fams []rules.Family
	add := func(f rules.Family) {
		if !slices.Contains(fams, f) {
			fams = append(fams, f)
		}
	}
	for _, ip := range ips {
		switch {
		case ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified():
		case ip.To4() != nil:
			add(rules.IPv4)
		default:
			add(rules.IPv6)
		}
	}
	slices.Sort(fams)
	return fams, nil
}

// judgePod is what ADD and CHECK share: name the pod, let exempt pods
// through, find its families and decide. It fills ev as it goes; the pod is
// to be redirected only when the decision says Meshed.
func judgePod(conf *config.NetConf, args *skel.CmdArgs, log *slog.Logger, ev *node.Event) (mesh.Decision, error) {
	namespace, name, err := podID(args.Args)
	if err != nil {
		return mesh.Decision{}, err
	}
	ev.Namespace, ev.Pod, ev.PodUID = namespace, name, podUID(args.Args)
	if why := conf.Exempt(namespace, name); why != "" {
		ev.Decision, ev.Reason = "skipped", why
		return mesh.Decision{Reason: why}, nil
	}
	fams, err := podFamilies(conf.Result, args.Netns)
	if err != nil {
		return mesh.Decision{}, types.NewError(types.ErrInvalidNetNS, "cannot read the pod's addresses", err.Error())
	}
	d, err := judge(context.Background(), conf, log, namespace, name, ev.PodUID, fams)
	if err != nil {
		return d, err
	}
	ev.Mesh, ev.Reason = d.Mesh, d.Reason
	if !d.Meshed {
		ev.Decision = "skipped"
		return d, nil
	}
	for _, n := range d.Notes {
		log.Info("proxy identity", "mesh", d.Mesh, "note", n)
	}
	if d.Spec == nil {
		return d, cniErr(ErrApply, "pod %s/%s: mesh %s decided without a rule spec", namespace, name, d.Mesh)
	}
	if d.Mesh == mesh.Kuma {
		// kuma-cni decides the families from every address in the netns,
		// link-local included; Kuma's validation expects what it writes.
		addrs, err := netnsAddrs(args.Netns)
		if err != nil {
			return d, types.NewError(types.ErrInvalidNetNS, "cannot read the pod's addresses", err.Error())
		}
		d.Spec.Families = mesh.KumaFamilies(addrs)
		if !*conf.IPv6 && !slices.Contains(fams, rules.IPv6) {
			// "ipv6": false, and IPv6 only link-local: nothing to refuse.
			d.Spec.Families = slices.DeleteFunc(d.Spec.Families, func(f rules.Family) bool { return f == rules.IPv6 })
		}
		log.Debug("families as kuma-cni decides them", "families", fmt.Sprint(d.Spec.Families))
	}
	return d, checkIPv6(conf, d.Spec.Families)
}

// netnsAddrs lists every address of every interface in the netns. An up
// interface that will get an IPv6 link-local address counts as holding
// one (fe80::): the kernel adds it only once the carrier is seen, which
// may be a moment after the primary plugin returns, while Kuma's
// validation, which runs later, sees it.
func netnsAddrs(netns string) ([]netip.Addr, error) {
	var out []netip.Addr
	err := ns.WithNetNSPath(netns, func(ns.NetNS) error {
		ifaces, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, ifc := range ifaces {
			addrs, err := ifc.Addrs()
			if err != nil {
				return err
			}
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok {
						out = append(out, ip.Unmap())
					}
				}
			}
			if ifc.Flags&net.FlagLoopback == 0 && ifc.Flags&net.FlagUp != 0 && linkLocalComing(ifc.Name) {
				out = append(out, netip.MustParseAddr("fe80::"))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list addresses in %s: %w", netns, err)
	}
	return out, nil
}

// judge decides the pod: from the runtime's annotations when they can,
// else after one bounded lookup. A pod that cannot be judged is a
// try-again-later error, so it never starts without its redirect.
func judge(ctx context.Context, conf *config.NetConf, log *slog.Logger, namespace, name, uid string, fams []rules.Family) (mesh.Decision, error) {
	pod := mesh.Pod{Namespace: namespace, Name: name, Annotations: conf.RuntimeConfig.PodAnnotations}
	var d mesh.Decision
	var err error
	if pod.Annotations != nil {
		d, err = conf.MeshSet.Decide(pod, fams)
		if err != nil {
			return d, annotationErr(namespace, name, err)
		}
		if !d.NeedSpec {
			return d, nil
		}
		log.Debug("annotations cannot decide, looking the pod up", "reason", d.Reason)
	} else {
		log.Debug("runtime passed no pod annotations, looking the pod up")
	}
	full, lerr := lookupPod(ctx, conf.AgentSocket, conf.Kubeconfig, namespace, name, uid, conf.Timeout)
	if lerr != nil {
		return d, types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("cannot judge pod %s/%s: no usable annotations and the pod lookup failed", namespace, name),
			lerr.Error())
	}
	if full.Annotations == nil {
		full.Annotations = pod.Annotations
	}
	d, err = conf.MeshSet.Decide(full, fams)
	if err != nil {
		return d, annotationErr(namespace, name, err)
	}
	if d.NeedSpec {
		return d, types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("cannot judge pod %s/%s even with its spec", namespace, name), d.Reason)
	}
	return d, nil
}

func annotationErr(namespace, name string, err error) error {
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("pod %s/%s: %v", namespace, name, err), "")
}

// checkIPv6 refuses a meshed pod with an IPv6 address when the config turns
// IPv6 off: leaving a family unredirected would bypass the proxy.
func checkIPv6(conf *config.NetConf, fams []rules.Family) error {
	if *conf.IPv6 || !slices.Contains(fams, rules.IPv6) {
		return nil
	}
	return types.NewError(types.ErrInvalidNetworkConfig,
		"pod has an IPv6 address but \"ipv6\" is false: refusing to leave IPv6 traffic unredirected", "")
}

// linkLocalComing says whether the kernel gives ifname an IPv6 link-local
// address: IPv6 is on and the address generation mode is not "none". It
// reads the calling thread's netns.
func linkLocalComing(ifname string) bool {
	read := func(key string) string {
		b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + ifname + "/" + key)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	return read("disable_ipv6") == "0" && read("addr_gen_mode") != "1"
}
