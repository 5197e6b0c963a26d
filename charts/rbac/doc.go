// Package rbac proves, against a real API server, that the permissions the
// Helm chart grants the agent (charts/mesh-cni/templates/rbac-*.yaml,
// templates/repair-*.yaml, templates/plugin-*.yaml,
// templates/own-node-policy*.yaml) are enough for everything the agent does
// through the API, and no more than its enabled features need. It holds
// tests only; see README.md.
package rbac
