package main

// Seams to the packages the plugin drives. They are variables only so the
// plugin builds while those packages are being written; each is wired to the
// real function as soon as it exists.

import (
	"errors"
	"fmt"
	"io"

	"github.com/mesh-cni/mesh-cni/pkg/mesh"
	"github.com/mesh-cni/mesh-cni/pkg/rules"
)

type decision = mesh.Decision

type ruleBackend interface {
	Name() string
	Apply(netnsPath string, rs rules.RuleSet) error
	Check(netnsPath string, rs rules.RuleSet) error
	Delete(netnsPath string) error
}

var errNotWired = errors.New("not available in this build")

var decide = mesh.Decide

var generate = rules.Generate

var newBackend = func(name string) (ruleBackend, error) {
	return nil, fmt.Errorf("backend %s: %w", name, errNotWired)
}

var explainRun = func(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "explain:", errNotWired)
	return 2
}
