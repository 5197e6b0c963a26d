// Command mesh-cni-podget is the plugin's fallback pod lookup: one GET of
// the pod from the API server through the kubeconfig the agent writes,
// printed as JSON (internal/lookup/podget.Result). The plugin execs it, from the same
// dir as itself, only when the agent's pod cache cannot answer; keeping
// this GET here keeps crypto/tls (over 2 MB) out of the plugin binary the
// runtime execs for every pod.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/mesh-cni/mesh-cni/internal/lookup/apiget"
	"github.com/mesh-cni/mesh-cni/internal/lookup/podget"
	"github.com/mesh-cni/mesh-cni/internal/version"
)

func main() {
	// One P, as the plugin: one GET, serial work.
	runtime.GOMAXPROCS(1)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "version" || args[0] == "--version") {
		fmt.Fprintln(stdout, podget.Binary, version.Version)
		return 0
	}
	fs := flag.NewFlagSet(podget.Binary, flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (JSON, as the mesh-cni agent writes it)")
	namespace := fs.String("namespace", "", "the pod's namespace")
	name := fs.String("name", "", "the pod's name")
	timeout := fs.Duration("timeout", 0, "time for the whole lookup, retry included")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s --kubeconfig FILE --namespace NS --name NAME --timeout DURATION\n"+
			"Run by the mesh-cni plugin; prints the pod, or why there is none, as JSON.\n", podget.Binary)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 || *kubeconfig == "" || *namespace == "" || *name == "" || *timeout <= 0 {
		fmt.Fprintf(stderr, "%s: --kubeconfig, --namespace, --name and a positive --timeout are required\n", podget.Binary)
		fs.Usage()
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	pod, err := apiget.Pod(ctx, *kubeconfig, *namespace, *name)
	var res podget.Result
	switch {
	case err == nil:
		res.Pod = &pod
	case errors.Is(err, podget.ErrNotFound):
		res.NotFound = true
	default:
		res.Error = err.Error()
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			res.Error = fmt.Sprintf("%v (%v)", ctx.Err(), err)
		}
	}
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		fmt.Fprintf(stderr, "%s: write result: %v\n", podget.Binary, err)
		return 1
	}
	return 0
}
