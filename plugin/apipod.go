package main

import (
	"encoding/json"
	"fmt"

	"github.com/mesh-cni/mesh-cni/pkg/mesh"
)

func decodeAPIPod(b []byte) (mesh.Pod, error) {
	var p mesh.APIPod
	if err := json.Unmarshal(b, &p); err != nil {
		return mesh.Pod{}, fmt.Errorf("decode pod: %w", err)
	}
	return p.Pod(), nil
}
