// Package check verifies a cluster before and after mesh-cni is installed.
// Each check is a small function that reads the API and returns a Result;
// mesh-cnictl formats the results.
package check

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Status of one check.
type Status string

const (
	OK   Status = "ok"
	Warn Status = "warn" // worth knowing; does not fail the run
	Fail Status = "fail"
)

// Result is the outcome of one check. Details name the objects involved
// (nodes, pods); Hint says how to fix a warning or failure.
type Result struct {
	Name    string   `json:"name"`
	Status  Status   `json:"status"`
	Message string   `json:"message,omitempty"`
	Details []string `json:"details,omitempty"`
	Hint    string   `json:"hint,omitempty"`
}

// Report is the whole run, as printed with -o json.
type Report struct {
	Phase     string   `json:"phase"` // "pre" or "post"
	Namespace string   `json:"namespace"`
	Version   string   `json:"version"`
	OK        bool     `json:"ok"`
	Checks    []Result `json:"checks"`
}

// Failed counts the failed checks.
func Failed(rs []Result) int {
	n := 0
	for _, r := range rs {
		if r.Status == Fail {
			n++
		}
	}
	return n
}

func symbol(s Status) string {
	switch s {
	case OK:
		return "✓"
	case Warn:
		return "‼"
	default:
		return "✗"
	}
}

// WriteText prints one line per check, and below a warning or failure its
// details and hint, indented.
func WriteText(w io.Writer, rep Report) error { return writeText(w, rep, false) }

// WriteWide is WriteText with the details of the checks that passed too.
func WriteWide(w io.Writer, rep Report) error { return writeText(w, rep, true) }

func writeText(w io.Writer, rep Report, wide bool) error {
	var b strings.Builder
	for _, r := range rep.Checks {
		line := symbol(r.Status) + " " + r.Name
		if r.Message != "" {
			line += ": " + r.Message
		}
		b.WriteString(line + "\n")
		if r.Status == OK && !wide {
			continue
		}
		for _, d := range r.Details {
			b.WriteString("    " + d + "\n")
		}
		if r.Hint != "" {
			b.WriteString("    hint: " + r.Hint + "\n")
		}
	}
	if n := Failed(rep.Checks); n > 0 {
		fmt.Fprintf(&b, "\n%d of %d checks failed\n", n, len(rep.Checks))
	} else {
		fmt.Fprintf(&b, "\nall %d checks passed\n", len(rep.Checks))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints the report as indented JSON.
func WriteJSON(w io.Writer, rep Report) error {
	if rep.Checks == nil {
		rep.Checks = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
