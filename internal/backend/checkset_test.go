package backend_test

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/mesh-cni/mesh-cni/internal/rules"
)

// setMutants edits the lists the nftables backend writes as anonymous
// sets (two or more ports, or two or more prefixes of one family): one
// element changed, one added, and one removed when two are left. Each
// change names the element Check must report.
func setMutants(r rules.Rule) []changed {
	var out []changed
	add := func(kind, what, name string, f func(*rules.Rule)) {
		m := r
		f(&m)
		out = append(out, changed{what: what, kind: kind, name: name, r: m})
	}
	for _, l := range []struct {
		field string
		ps    []rules.PortRange
		set   func(*rules.Rule, []rules.PortRange)
	}{
		{"dport", r.DPorts, func(m *rules.Rule, ps []rules.PortRange) { m.DPorts = ps }},
		{"sport", r.SPorts, func(m *rules.Rule, ps []rules.PortRange) { m.SPorts = ps }},
	} {
		if len(l.ps) < 2 {
			continue
		}
		for i, p := range l.ps {
			if p.First == p.Last && free(l.ps, i, p.First+1, p.Last+1) {
				add(l.field+" set: port changed", fmt.Sprintf("%s set %d→%d", l.field, p.First, p.First+1), portName(p), func(m *rules.Rule) {
					ps := slices.Clone(l.ps)
					ps[i].First++
					ps[i].Last++
					l.set(m, ps)
				})
				break
			}
		}
		for i, p := range l.ps {
			if p.First < p.Last {
				add(l.field+" set: range changed", fmt.Sprintf("%s set range %s end -1", l.field, portName(p)), portName(p), func(m *rules.Rule) {
					ps := slices.Clone(l.ps)
					ps[i].Last--
					l.set(m, ps)
				})
				break
			}
		}
		top := rules.PortRange{First: 1, Last: 1}
		for _, p := range l.ps {
			top.First = max(top.First, p.Last+10)
		}
		top.Last = top.First
		add(l.field+" set: port added", fmt.Sprintf("%s set + %d", l.field, top.First), portName(top), func(m *rules.Rule) {
			l.set(m, append(slices.Clone(l.ps), top))
		})
		if len(l.ps) >= 3 {
			last := l.ps[len(l.ps)-1]
			add(l.field+" set: port removed", fmt.Sprintf("%s set - %s", l.field, portName(last)), portName(last), func(m *rules.Rule) {
				l.set(m, slices.Clone(l.ps[:len(l.ps)-1]))
			})
		}
	}
	for _, l := range []struct {
		field string
		ps    []netip.Prefix
		set   func(*rules.Rule, []netip.Prefix)
	}{
		{"daddr", r.Dst, func(m *rules.Rule, ps []netip.Prefix) { m.Dst = ps }},
		{"saddr", r.Src, func(m *rules.Rule, ps []netip.Prefix) { m.Src = ps }},
	} {
		for _, fam := range []struct {
			name  string
			v4    bool
			extra netip.Prefix
		}{
			{"v4", true, netip.MustParsePrefix("233.252.0.0/24")},
			{"v6", false, netip.MustParsePrefix("3fff:100::/32")},
		} {
			var idx []int
			for i, p := range l.ps {
				if p.Addr().Is4() == fam.v4 {
					idx = append(idx, i)
				}
			}
			if len(idx) < 2 {
				continue
			}
			kind := l.field + " set: " + fam.name + " prefix "
			first, last := l.ps[idx[0]], l.ps[idx[len(idx)-1]]
			add(kind+"moved", fmt.Sprintf("%s set %s moved", l.field, first), prefixName(first), func(m *rules.Rule) {
				l.set(m, movePrefix(l.ps, idx[0]))
			})
			add(kind+"added", fmt.Sprintf("%s set + %s", l.field, fam.extra), prefixName(fam.extra), func(m *rules.Rule) {
				l.set(m, append(slices.Clone(l.ps), fam.extra))
			})
			if len(idx) >= 3 {
				add(kind+"removed", fmt.Sprintf("%s set - %s", l.field, last), prefixName(last), func(m *rules.Rule) {
					l.set(m, slices.Delete(slices.Clone(l.ps), idx[len(idx)-1], idx[len(idx)-1]+1))
				})
			}
		}
	}
	return out
}

// free reports whether first-last, widened by one port each side, touches
// no element of ps but the one at skip (so it stays an element of its own).
func free(ps []rules.PortRange, skip int, first, last uint16) bool {
	for i, p := range ps {
		if i != skip && int(first)-1 <= int(p.Last) && int(p.First) <= int(last)+1 {
			return false
		}
	}
	return true
}

// portName and prefixName print an element as Check does.
func portName(p rules.PortRange) string {
	if p.First == p.Last {
		return fmt.Sprint(p.First)
	}
	return fmt.Sprintf("%d-%d", p.First, p.Last)
}

func prefixName(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}
