package main

// The timed part: each chain's pods set up before the clock starts, then
// ADD and DEL through libcni in the run's shape.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/mesh-cni/mesh-cni/internal/testsupport/testenv"
)

// conflist is c after ptp + host-local on subnet.
func conflist(c chain, name, subnet, dataDir string) *libcni.NetworkConfigList {
	plugins := []any{map[string]any{"type": "ptp", "ipMasq": false, "ipam": map[string]any{
		"type": "host-local", "ranges": []any{[]any{map[string]any{"subnet": subnet}}},
		"dataDir": dataDir,
	}}}
	if c.plugin != nil {
		plugins = append(plugins, c.plugin)
	}
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": plugins})
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		fail(err.Error())
	}
	return list
}

// runtimeConf is what a CRI runtime passes for pod name of the bench
// namespace; libcni hands the annotations only to entries that ask for the
// io.kubernetes.cri.pod-annotations capability.
func runtimeConf(id, netns, pod string, annotations map[string]string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: id, NetNS: netns, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", benchNamespace},
			{"K8S_POD_NAME", pod}, {"K8S_POD_INFRA_CONTAINER_ID", id}},
		CapabilityArgs: map[string]any{"io.kubernetes.cri.pod-annotations": annotations},
	}
}

// bed is one chain ready to run: its conflist, libcni and one netns and
// runtime config per pod, made before any timing.
type bed struct {
	res      *result
	add, del func(i int)
	close    func()
}

func newBed(binDir string, c chain, r run, idx int, annotations map[string]string) *bed {
	var cleanup []func()
	dataDir, err := os.MkdirTemp("", "mesh-cni-bench-ipam-")
	if err != nil {
		fail(err.Error())
	}
	cleanup = append(cleanup, func() { os.RemoveAll(dataDir) })
	list := conflist(c, fmt.Sprintf("bench%d", idx), fmt.Sprintf("198.19.%d.0/24", idx), dataDir)
	cacheDir, _ := os.MkdirTemp("", "mesh-cni-bench-cache-")
	cleanup = append(cleanup, func() { os.RemoveAll(cacheDir) })
	exec := newTimedExec()
	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir, refPlugins}, cacheDir, exec)

	netnss := make([]ns.NetNS, r.pods)
	for i := range netnss {
		if netnss[i], err = testutils.NewNS(); err != nil {
			fail(err.Error())
		}
	}
	cleanup = append(cleanup, func() {
		for _, n := range netnss {
			_ = testenv.RemoveNS(n)
		}
	})
	rts := make([]*libcni.RuntimeConf, r.pods)
	for i := range rts {
		rts[i] = runtimeConf(fmt.Sprintf("bench%02d%06d", idx, i), netnss[i].Path(), podName(i), annotations)
	}
	res := &result{chain: c.name, run: r.name, add: make([]time.Duration, r.pods), del: make([]time.Duration, r.pods), exec: exec}
	var mu sync.Mutex
	timed := func(dst []time.Duration, i int, f func() error) {
		start := time.Now()
		err := f()
		dst[i] = time.Since(start)
		if err != nil {
			mu.Lock()
			res.errs++
			if res.errs == 1 {
				fmt.Fprintf(os.Stderr, "%s: %v\n", c.name, err)
			}
			mu.Unlock()
		}
	}
	ctx := context.Background()
	return &bed{
		res: res,
		add: func(i int) {
			timed(res.add, i, func() error { _, err := cni.AddNetworkList(ctx, list, rts[i]); return err })
		},
		del: func(i int) { timed(res.del, i, func() error { return cni.DelNetworkList(ctx, list, rts[i]) }) },
		close: func() {
			for _, f := range cleanup {
				f()
			}
		},
	}
}

// measure runs one chain alone in a concurrent shape.
func measure(binDir string, c chain, r run, idx int, annotations map[string]string) result {
	b := newBed(binDir, c, r, idx, annotations)
	defer b.close()
	start := time.Now()
	if r.burst {
		parallel(r.pods, r.conc, b.add)
		parallel(r.pods, r.conc, b.del)
	} else {
		parallel(r.pods, r.conc, func(i int) { b.add(i); b.del(i) })
	}
	b.res.wall = time.Since(start)
	return *b.res
}

// interleaved runs the serial shape for every chain at once, pod by pod in
// turn, so load that comes and goes on the machine hits every chain alike.
func interleaved(binDir string, chains []chain, r run, annotations map[string]string) []result {
	beds := make([]*bed, len(chains))
	for i, c := range chains {
		beds[i] = newBed(binDir, c, r, i, annotations)
	}
	for p := 0; p < r.pods; p++ {
		for _, b := range beds {
			start := time.Now()
			b.add(p)
			b.del(p)
			b.res.wall += time.Since(start)
		}
	}
	out := make([]result, len(beds))
	for i, b := range beds {
		b.close()
		out[i] = *b.res
	}
	return out
}

// parallel calls f(0..n-1) from conc workers.
func parallel(n, conc int, f func(int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}
