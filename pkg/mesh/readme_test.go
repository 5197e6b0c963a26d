package mesh

import (
	"os"
	"strings"
	"testing"
)

// The README is the user reference: every honoured annotation, label and
// env var must be in it.
func TestReadmeNamesEverything(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	names := append([]string{LinkerdControlPlaneLabel, IstioDNSCaptureEnv, IstioDisableEnvoyEnv, LinkerdInit, IstioInit}, HonouredAnnotations...)
	for _, n := range names {
		if !strings.Contains(doc, "`"+n) {
			t.Errorf("README.md does not document %s", n)
		}
	}
	for _, key := range []string{"enabled", "sidecar", "selectAnnotation", "proxyUID", "proxyGID", "inboundPort", "outboundPort",
		"tunnelPort", "dnsPort", "portsToRedirect", "ignoreInboundPorts", "ignoreOutboundPorts", "includeOutboundPorts",
		"skipSubnets", "includeSubnets", "excludeInterfaces", "interceptionMode", "captureDNS", "proxyLoopbackToInbound", "trustAnnotations"} {
		if !strings.Contains(doc, "| `"+key+"` |") {
			t.Errorf("README.md settings table lacks %s", key)
		}
	}
}
