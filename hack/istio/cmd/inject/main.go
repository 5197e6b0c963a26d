// Command inject runs Istio's sidecar injector (istio.io/istio/pkg/kube/inject,
// the code behind `istioctl kube-inject`) on pod files, offline.
//
//	inject -manifest manifest.yaml -o outdir pod.yaml...
//
// The injector's templates, values and mesh config come from the
// istio-sidecar-injector and istio ConfigMaps in the output of
// `istioctl manifest generate`. Each injected pod is written to outdir under
// the input's file name.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigyaml "sigs.k8s.io/yaml"

	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/kube/inject"
)

func main() {
	manifest := flag.String("manifest", "", "output of istioctl manifest generate")
	out := flag.String("o", "", "output directory")
	flag.Parse()
	if *manifest == "" || *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: inject -manifest manifest.yaml -o outdir pod.yaml...")
		os.Exit(2)
	}
	if err := run(*manifest, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "inject:", err)
		os.Exit(1)
	}
}

func run(manifest, outDir string, pods []string) error {
	cms, err := configMaps(manifest)
	if err != nil {
		return err
	}
	sidecar, ok := cms["istio-sidecar-injector"]
	if !ok {
		return fmt.Errorf("%s: no istio-sidecar-injector ConfigMap", manifest)
	}
	istio, ok := cms["istio"]
	if !ok {
		return fmt.Errorf("%s: no istio ConfigMap", manifest)
	}
	cfg, err := inject.UnmarshalConfig([]byte(sidecar.Data["config"]))
	if err != nil {
		return fmt.Errorf("istio-sidecar-injector config: %w", err)
	}
	templates, err := inject.ParseTemplates(cfg.RawTemplates)
	if err != nil {
		return fmt.Errorf("istio-sidecar-injector templates: %w", err)
	}
	values, err := inject.NewValuesConfig(sidecar.Data["values"])
	if err != nil {
		return fmt.Errorf("istio-sidecar-injector values: %w", err)
	}
	meshConfig, err := mesh.ApplyMeshConfigDefaults(istio.Data["mesh"])
	if err != nil {
		return fmt.Errorf("istio mesh config: %w", err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	for _, p := range pods {
		in, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		warn := func(w string) { fmt.Fprintf(os.Stderr, "%s: %s", p, w) }
		// A nil injector makes the library render the templates itself, as
		// istioctl kube-inject does with --injectConfigFile.
		if err := inject.IntoResourceFile(nil, templates, values, "", meshConfig, bytes.NewReader(in), &buf, warn); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		doc := bytes.TrimSuffix(buf.Bytes(), []byte("---\n"))
		if err := os.WriteFile(filepath.Join(outDir, filepath.Base(p)), doc, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// configMaps returns the ConfigMaps of a multi-document manifest by name.
func configMaps(path string) (map[string]*corev1.ConfigMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := yaml.NewYAMLReader(bufio.NewReader(f))
	res := map[string]*corev1.ConfigMap{}
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var cm corev1.ConfigMap
		if err := sigyaml.Unmarshal(doc, &cm); err != nil || cm.Kind != "ConfigMap" {
			continue
		}
		res[cm.Name] = &cm
	}
}
