package install

import (
	"os"
	"slices"
	"testing"
)

// Going back: ours is chained while the other plugin is absent; once its
// installer appends its entry (after ours, as Istio's and Linkerd's do),
// one write takes ours out and leaves theirs, and nothing is written
// again while theirs stays. If theirs goes, ours comes back.
func TestHandBackToTakesOursOutInOneWrite(t *testing.T) {
	for _, c := range []struct{ typ, entry string }{{"istio-cni", istioEntry}, {"linkerd-cni", linkerdEntry}} {
		e := newEnv(t, func(cfg *Config) { cfg.HandBackTo = c.typ })
		path := e.put(t, "10-kindnet.conflist", fixture(t, "kindnet-ipv4.conflist"))
		if _, err := e.in.InstallBinary(); err != nil {
			t.Fatal(err)
		}
		if res, err := e.in.Reconcile(); err != nil || !res.Wrote || res.HandedBack != "" {
			t.Fatalf("%s absent: %+v %v; want ours chained", c.typ, res, err)
		}
		// Their installer appends its entry after ours.
		withBoth := injectEntry(t, e.read(t, "10-kindnet.conflist"), c.entry)
		e.put(t, "10-kindnet.conflist", withBoth)
		before, _ := os.Stat(path)
		res, err := e.in.Reconcile()
		if err != nil {
			t.Fatal(err)
		}
		after, _ := os.Stat(path)
		if !res.Wrote || res.HandedBack != c.typ || os.SameFile(before, after) || len(res.Others) != 0 {
			t.Errorf("%s: result %+v; want one new file (rename) handing back", c.typ, res)
		}
		if _, err := parseConfig(path, e.read(t, "10-kindnet.conflist")); err != nil {
			t.Errorf("%s: the list without ours does not load: %v", c.typ, err)
		}
		types, _ := pluginTypes(e.read(t, "10-kindnet.conflist"))
		if !slices.Equal(types, []string{"ptp", "portmap", c.typ}) {
			t.Errorf("%s: chain %v, want the primary's and theirs only", c.typ, types)
		}
		if res, err := e.in.Reconcile(); err != nil || res.Wrote || res.HandedBack != c.typ {
			t.Errorf("%s: second pass %+v %v: want no write", c.typ, res, err)
		}
		// Their installer exits and cleans its entry up: ours comes back.
		e.put(t, "10-kindnet.conflist", fixture(t, "kindnet-ipv4.conflist"))
		if res, err := e.in.Reconcile(); err != nil || !res.Wrote || res.HandedBack != "" {
			t.Errorf("%s gone: %+v %v; want ours chained again", c.typ, res, err)
		}
		types, _ = pluginTypes(e.read(t, "10-kindnet.conflist"))
		if !slices.Equal(types, []string{"ptp", "portmap", "mesh-cni"}) {
			t.Errorf("%s gone: chain %v", c.typ, types)
		}
	}
}

func TestHandBackToChecked(t *testing.T) {
	checkRefused(t, []refusal{
		{func(c *Config) { c.HandBackTo = "cilium" }, "must be one of"},
		{func(c *Config) { c.HandBackTo = "istio-cni"; c.MigrateFrom = "istio-cni" }, "set one"},
		{func(c *Config) { c.HandBackTo = "istio-cni"; c.Subdir = true }, "inline chaining"},
		{func(c *Config) { c.HandBackTo = "linkerd-cni"; c.Chained = false }, "inline chaining"},
	})
}
