package rules

// Scenario is a golden scenario, for the external tests of this package.
type Scenario = scenario

// Scenarios returns the golden scenarios.
func Scenarios() []Scenario { return scenarios() }

// SpecOf returns a scenario's Spec.
func SpecOf(s Scenario) Spec { return s.spec }

// NameOf returns a scenario's name.
func NameOf(s Scenario) string { return s.name }
