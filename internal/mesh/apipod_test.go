package mesh

import (
	"encoding/json"
	"testing"
)

func TestAPIPodConversion(t *testing.T) {
	const doc = `{"kind":"Pod","metadata":{"namespace":"ns","name":"p","annotations":{"a":"b"}},
	"spec":{"securityContext":{"runAsUser":1000,"runAsGroup":3000},
	"initContainers":[{"name":"linkerd-proxy","restartPolicy":"Always","securityContext":{"runAsUser":2102}}],
	"containers":[{"name":"app","env":[{"name":"X","value":"1"}],"args":["serve"]}]}}`
	var p APIPod
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	pod := p.Pod()
	if !pod.SpecKnown || pod.Namespace != "ns" || pod.Name != "p" || pod.Annotations["a"] != "b" {
		t.Fatalf("metadata: %+v", pod)
	}
	if len(pod.InitContainers) != 1 || len(pod.Containers) != 1 {
		t.Fatalf("containers: %+v", pod)
	}
	proxy := pod.InitContainers[0]
	if proxy.RestartPolicy != "Always" || *proxy.RunAsUser != 2102 || *proxy.RunAsGroup != 3000 {
		t.Errorf("container securityContext must override the pod's field by field: %+v uid=%d gid=%d",
			proxy, *proxy.RunAsUser, *proxy.RunAsGroup)
	}
	app := pod.Containers[0]
	if *app.RunAsUser != 1000 || app.Env["X"] != "1" || len(app.Args) != 1 {
		t.Errorf("app: %+v", app)
	}
}
