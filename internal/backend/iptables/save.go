package iptables

import (
	"fmt"
	"strings"

	"github.com/mesh-cni/mesh-cni/internal/backend/validate"
)

// dump is an iptables-save (or iptables-restore input) parsed per table:
// chain names in order, and each chain's rules as argument lists (without
// "-A CHAIN").
type dump struct {
	tables []string
	chains map[string][]string              // table -> chains, declared order
	rules  map[string]map[string][][]string // table -> chain -> rules
}

func parse(text string) (*dump, error) {
	d := &dump{chains: map[string][]string{}, rules: map[string]map[string][][]string{}}
	table := ""
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || line == "COMMIT":
		case strings.HasPrefix(line, "*"):
			table = line[1:]
			d.tables = append(d.tables, table)
			d.rules[table] = map[string][][]string{}
		case table == "":
			return nil, fmt.Errorf("line %d outside a table: %q", n+1, line)
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			d.chains[table] = append(d.chains[table], name)
		case strings.HasPrefix(line, "-A "):
			args, err := split(line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
			chain := args[1]
			d.rules[table][chain] = append(d.rules[table][chain], args[2:])
		default:
			return nil, fmt.Errorf("line %d: unexpected %q", n+1, line)
		}
	}
	return d, nil
}

// split cuts a rule line into arguments the way iptables-restore does:
// on blanks, with double quotes grouping.
func split(line string) ([]string, error) {
	var args []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			inQuote, have = !inQuote, true
		case (c == ' ' || c == '\t') && !inQuote:
			if have {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if inQuote {
		return nil, fmt.Errorf("unterminated quote in %q", line)
	}
	if have {
		args = append(args, cur.String())
	}
	return args, nil
}

// target returns the value of -j (or --jump) in a rule, "" if none.
func target(rule []string) string {
	return flag(rule, "-j", "--jump")
}

func flag(rule []string, names ...string) string {
	for i := 0; i+1 < len(rule); i++ {
		for _, n := range names {
			if rule[i] == n {
				return rule[i+1]
			}
		}
	}
	return ""
}

func ours(name string) bool { return strings.HasPrefix(name, validate.ChainPrefix) }

// cleanup returns, per table of d that holds anything of ours, the
// restore commands that remove it: the rules jumping to our chains
// (deleted by position, last first), then our chains flushed and deleted.
func (d *dump) cleanup() map[string][]string {
	out := map[string][]string{}
	for _, t := range d.tables {
		var cmds, flush, del []string
		for _, c := range d.chains[t] {
			if ours(c) {
				flush = append(flush, "-F "+c)
				del = append(del, "-X "+c)
				continue
			}
			rules := d.rules[t][c]
			for i := len(rules) - 1; i >= 0; i-- {
				if ours(target(rules[i])) {
					cmds = append(cmds, fmt.Sprintf("-D %s %d", c, i+1))
				}
			}
		}
		cmds = append(append(cmds, flush...), del...)
		if len(cmds) > 0 {
			out[t] = cmds
		}
	}
	return out
}

// withCleanup puts the cleanup commands of each table at the start of that
// table's block of input, and adds blocks for tables input does not touch,
// so one iptables-restore replaces our old rules with the new ones.
func withCleanup(input string, cleanup map[string][]string) string {
	if len(cleanup) == 0 {
		return input
	}
	var b strings.Builder
	done := map[string]bool{}
	for _, line := range strings.SplitAfter(input, "\n") {
		b.WriteString(line)
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "*") {
			for _, c := range cleanup[t[1:]] {
				b.WriteString(c + "\n")
			}
			done[t[1:]] = true
		}
	}
	for t, cmds := range cleanup {
		if done[t] {
			continue
		}
		fmt.Fprintf(&b, "*%s\n%s\nCOMMIT\n", t, strings.Join(cmds, "\n"))
	}
	return b.String()
}
