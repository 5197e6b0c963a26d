package rules

import (
	"strings"
	"sync"
	"testing"
)

// TestTrafficTProxyNoProxy: in TPROXY mode, while no proxy listens on the
// inbound port, a connection to a port the app listens on must not reach the
// app, with either renderer and in both families: iptables' TPROXY drops
// it, and nft's tproxy, which is not terminal, is followed by a drop.
//
// A dropped SYN is only seen as the dial's timeout (the shared scaled
// timeout), so the renderers run in parallel, each in its own netns pair,
// and each dials both families at once: the test waits one timeout, not
// four.
func TestTrafficTProxyNoProxy(t *testing.T) {
	needTrafficTools(t)
	for _, renderer := range []string{"nft", "iptables"} {
		t.Run(renderer, func(t *testing.T) {
			t.Parallel()
			spec := istioSpec(dual)
			spec.Mode = TProxy
			tp := newTopology(t, "n"+renderer[:1])
			listen(t, tp.pod, appUID, false, "app", "tcp:[::]:8080", "tcp:[::]:15021")
			checkProbes(t, tp, []probe{
				{"before: inbound reaches the app", true, 0, "tcp", podIP4 + ":8080", "app", ""},
				{"before: inbound v6 reaches the app", true, 0, "tcp6", "[" + podIP6 + "]:8080", "app", ""},
			})
			tp.apply(t, Generate(spec), renderer)
			noProxy := []probe{
				{"no proxy: inbound does not reach the app", true, 0, "tcp", podIP4 + ":8080", "", ""},
				{"no proxy: inbound v6 does not reach the app", true, 0, "tcp6", "[" + podIP6 + "]:8080", "", ""},
			}
			got := make([]string, len(noProxy))
			var wg sync.WaitGroup
			for i, p := range noProxy {
				wg.Go(func() { got[i] = dial(tp.peer, p.uid, p.network, p.dst, p.src) })
			}
			wg.Wait()
			for i, p := range noProxy {
				if !strings.HasPrefix(got[i], "error:") || !strings.Contains(got[i], "timeout") && !strings.Contains(got[i], "refused") {
					t.Errorf("%s: %s %s got %q, want a timeout or a refusal", p.what, p.network, p.dst, got[i])
				}
			}
			checkProbes(t, tp, []probe{
				{"excluded inbound port still reaches the app", true, 0, "tcp", podIP4 + ":15021", "app", ""},
			})
		})
	}
}
