package install

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// Istio's own node agent, install-cni, on the same conf and bin dirs as
// this installer, both ways: migrateFrom while install-cni runs and then
// stops (Istio's cleanup takes its entry and binary out), and handBackTo
// while it starts again and mesh-cni is uninstalled. install-cni is the
// image `hack/istio-images.sh cni` builds from the module pinned in
// hack/istio/go.mod, run by docker with its host paths mounted as Istio's
// chart mounts them (/host/opt/cni/bin, /host/etc/cni/net.d,
// /var/run/istio-cni) and a service account token of its own (it only
// writes it into the plugin's kubeconfig). Every read of the primary must
// be valid JSON and name at least one of the two plugins; the end state of
// each way holds only the new one. Skipped without
// MESH_CNI_ISTIO_CNI_IMAGE (the image's name) and docker.
func TestWithIstiosOwnInstallCNI(t *testing.T) {
	image := os.Getenv("MESH_CNI_ISTIO_CNI_IMAGE")
	if image == "" {
		t.Skip("MESH_CNI_ISTIO_CNI_IMAGE is not set (the image of `hack/istio-images.sh cni`)")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker")
	}
	e := newEnv(t, func(c *Config) { c.MigrateFrom = "istio-cni" })
	path := e.put(t, "10-kindnet.conflist", fixture(t, "kindnet-ipv4.conflist"))
	run, sa := t.TempDir(), t.TempDir()
	writeServiceAccount(t, sa)
	name := fmt.Sprintf("mesh-cni-istio-%d", time.Now().UnixNano())
	startIstio := func() {
		out, err := exec.Command("docker", "run", "-d", "--rm", "--name", name, "--network", "none",
			"-e", "KUBERNETES_SERVICE_HOST=10.96.0.1", "-e", "KUBERNETES_SERVICE_PORT=443",
			"-e", "NODE_NAME=n1", "-e", "POD_NAME=istio-cni-node-x", "-e", "POD_NAMESPACE=istio-system",
			"-e", "CHAINED_CNI_PLUGIN=true", "-e", "REPAIR_ENABLED=false", "-e", "AMBIENT_ENABLED=false",
			"-v", e.bin+":/host/opt/cni/bin", "-v", e.conf+":/host/etc/cni/net.d", "-v", run+":/var/run/istio-cni",
			"-v", sa+":/var/run/secrets/kubernetes.io/serviceaccount", image, "install-cni").CombinedOutput()
		if err != nil {
			t.Fatalf("docker run %s: %v\n%s", image, err, out)
		}
	}
	stopIstio := func() {
		if out, err := exec.Command("docker", "stop", "-t", "20", name).CombinedOutput(); err != nil {
			t.Errorf("docker stop: %v\n%s", err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	waitFor := func(what string, ok func([]byte) bool) {
		t.Helper()
		deadline := time.Now().Add(testenv.Scale(30 * time.Second))
		for {
			data, _ := os.ReadFile(path)
			if ok(data) {
				return
			}
			if time.Now().After(deadline) {
				logs, _ := exec.Command("docker", "logs", name).CombinedOutput()
				t.Fatalf("%s: conflist:\n%s\ninstall-cni:\n%s", what, data, logs)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	has := func(data []byte, typ string) bool { types, _ := pluginTypes(data); return contains(types, typ) }
	opts := WatchOptions{Resync: time.Second, RetryDelay: 100 * time.Millisecond, TakeoverQuiet: 2 * time.Second}

	// Forward: istio-cni alone, then mesh-cni with migrateFrom, then istio-cni stopped.
	startIstio()
	waitFor("install-cni chains istio-cni", func(d []byte) bool { return has(d, "istio-cni") })
	stopSample := make(chan struct{})
	sampled := make(chan *sample)
	go func() { sampled <- sampleFile(t, path, "istio-cni", stopSample) }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.in.Run(ctx, opts, func(State) {}) }()
	waitFor("mesh-cni takes over", func(d []byte) bool { return has(d, "mesh-cni") })
	time.Sleep(3 * time.Second) // install-cni still runs: whatever it re-inserts is taken out again
	stopIstio()
	waitFor("istio-cni gone, mesh-cni alone", func(d []byte) bool { return has(d, "mesh-cni") && !has(d, "istio-cni") })
	time.Sleep(time.Second)
	close(stopSample)
	fwd := <-sampled
	cancel()
	<-done
	t.Logf("forward: %d reads, %d with both plugins (longest %v), %d with neither, %d invalid", fwd.reads, fwd.both, fwd.maxBoth, fwd.neither, fwd.invalid)
	if fwd.invalid > 0 || fwd.neither > 0 {
		t.Errorf("forward: %d reads not valid JSON, %d with neither plugin", fwd.invalid, fwd.neither)
	}
	// A re-insert of install-cni is taken out again within one pass (the
	// fake installer's test bounds it at 100 ms; docker and a loaded host
	// are slower); both plugins for the whole 3 s means no takeover.
	if fwd.maxBoth > testenv.Scale(time.Second) {
		t.Errorf("forward: both plugins chained for %v at a stretch", fwd.maxBoth)
	}
	if data, _ := os.ReadFile(path); has(data, "istio-cni") || !has(data, "mesh-cni") {
		t.Errorf("after the takeover:\n%s", data)
	}

	// Back: handBackTo, istio-cni started again, mesh-cni uninstalled.
	cfg := e.in.cfg
	cfg.MigrateFrom, cfg.HandBackTo = "", "istio-cni"
	back, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopSample = make(chan struct{})
	go func() { sampled <- sampleFile(t, path, "istio-cni", stopSample) }()
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- back.Run(ctx, opts, func(State) {}) }()
	startIstio()
	defer stopIstio()
	waitFor("handed back: istio-cni alone", func(d []byte) bool { return has(d, "istio-cni") && !has(d, "mesh-cni") })
	time.Sleep(2 * time.Second)
	cancel()
	<-done
	if err := back.Uninstall(); err != nil {
		t.Errorf("uninstall: %v", err)
	}
	time.Sleep(time.Second)
	close(stopSample)
	rev := <-sampled
	t.Logf("back: %d reads, %d with both plugins (longest %v), %d with neither, %d invalid", rev.reads, rev.both, rev.maxBoth, rev.neither, rev.invalid)
	if rev.invalid > 0 || rev.neither > 0 {
		t.Errorf("back: %d reads not valid JSON, %d with neither plugin", rev.invalid, rev.neither)
	}
	if rev.maxBoth > testenv.Scale(time.Second) {
		t.Errorf("back: both plugins chained for %v at a stretch", rev.maxBoth)
	}
	if data, _ := os.ReadFile(path); !has(data, "istio-cni") || has(data, "mesh-cni") {
		t.Errorf("after going back:\n%s", data)
	}
	if _, err := os.Stat(filepath.Join(e.bin, "istio-cni")); err != nil {
		t.Errorf("Istio's binary after mesh-cni's uninstall: %v", err)
	}
}

// writeServiceAccount puts a token, namespace and CA certificate where a
// pod's service account is mounted.
func writeServiceAccount(t *testing.T, dir string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{
		"ca.crt":    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"token":     []byte("test-token"),
		"namespace": []byte("istio-system"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
