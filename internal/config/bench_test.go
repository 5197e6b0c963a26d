package config

import (
	"testing"

	"github.com/mesh-cni/mesh-cni/internal/node"
)

// chartEntry is the entry as the chart wrote it before the agent resolved
// entries (every top-level key set, profiles partly).
const chartEntry = `{"type":"mesh-cni","capabilities":{"io.kubernetes.cri.pod-annotations":true},"logLevel":"info",` +
	`"backend":"auto","ipv6":true,"excludeNamespaces":["kube-system","mesh-cni"],"agentNamespace":"mesh-cni",` +
	`"agentPodPrefix":"mesh-cni-","lookupTimeout":"5s","kubeconfig":"/var/lib/mesh-cni/kubeconfig",` +
	`"agentSocket":"/var/run/mesh-cni/agent.sock","reportSocket":"/var/run/mesh-cni/report.sock",` +
	`"readyMarker":"/var/run/mesh-cni/ready","meshes":{"custom":{"enabled":false},"istio":{"enabled":true,` +
	`"inboundPort":15006,"outboundPort":15001,"proxyGID":1337,"proxyUID":1337,"tunnelPort":15008},` +
	`"linkerd":{"enabled":true,"ignoreInboundPorts":["4190","4191"],"inboundPort":4143,"outboundPort":4140,"proxyUID":2102}}}`

// BenchmarkParse is the per-verb cost of reading the chain entry: as
// written (every default applied on the spot), and as the agent writes it.
func BenchmarkParse(b *testing.B) {
	resolved, err := Load([]byte(chartEntry), HostPaths{
		Kubeconfig: node.DefaultKubeconfig, AgentSocket: node.DefaultAgentSocket,
		ReportSocket: node.DefaultReportSocket, ReadyMarker: node.DefaultReadyMarker,
	})
	if err != nil {
		b.Fatal(err)
	}
	for name, entry := range map[string]string{"as-written": chartEntry, "resolved": string(resolved)} {
		stdin := []byte(`{"cniVersion":"1.0.0","name":"k8s-pod-network",` + entry[1:])
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(stdin); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
