package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// pilotAgent is where Istio's proxyv2 image keeps pilot-agent (its
// ENTRYPOINT); the stand-in image puts Istio's own build there too.
const pilotAgent = "/usr/local/bin/pilot-agent"

// proxyv2 is the entrypoint of an image that stands in for Istio's proxyv2
// image, whose entrypoint is pilot-agent. Istio's injector runs that image
// twice in a pod, with arguments only:
//
//   - istio-proxy: `proxy sidecar ...` starts pilot-agent and Envoy. Envoy is
//     not built here, so the test proxy serves Istio's sidecar ports instead:
//     outbound 15001, inbound 15006, the readiness port 15021 (the injected
//     probes GET /healthz/ready there) and, when the pod's proxy captures DNS
//     (ISTIO_META_DNS_CAPTURE=true), DNS on 15053.
//   - anything else, such as istio-validation's `istio-iptables ...
//     --run-validation`, is Istio's own pilot-agent, executed in place.
func proxyv2(args []string) error {
	if len(args) >= 2 && args[0] == "proxy" && args[1] == "sidecar" {
		a := []string{"-name", "proxy", "-outbound", "15001", "-inbound", "15006", "-health", "15021"}
		if os.Getenv("ISTIO_META_DNS_CAPTURE") == "true" {
			a = append(a, "-dns", "15053")
		}
		return serve(a)
	}
	if err := unix.Exec(pilotAgent, append([]string{"pilot-agent"}, args...), os.Environ()); err != nil {
		return fmt.Errorf("exec %s: %w", pilotAgent, err)
	}
	return nil
}
