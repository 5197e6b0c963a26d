package kindnode

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// ThawCluster thaws the cgroups below every node container of the kind
// cluster name (Docker provider) and returns how many it thawed.
func ThawCluster(name string) (int, error) {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=io.x-k8s.kind.cluster="+name).Output()
	if err != nil {
		return 0, fmt.Errorf("list the nodes of kind cluster %s: %w", name, err)
	}
	total := 0
	for _, id := range strings.Fields(string(out)) {
		pidOut, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", id).Output()
		if err != nil {
			continue // removed meanwhile
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(pidOut)))
		if err != nil || pid <= 0 {
			continue // not running
		}
		n, err := ThawUnder(pid)
		total += n
		if err != nil {
			return total, fmt.Errorf("node %s: %w", id, err)
		}
	}
	return total, nil
}
