// Command meshnet is the primary CNI of the offline kind node image: a small
// routed network in the manner of kindnet. On every node it writes a ptp +
// host-local + portmap conflist for the node's pod CIDRs and routes the other
// nodes' pod CIDRs via their node IPs. Like real primaries it owns its conflist:
// it writes it at start, whenever its inputs change and, with -rewrite-interval,
// again and again (as CNIs that regenerate their config on every resync do), each
// time atomically and without regard to what others added to it. The node label
// meshnet.mesh-cni.io/rewrite-interval (a Go duration) sets that per node, so a
// kind config can ask for it.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

func main() {
	confDir := flag.String("conf-dir", "/etc/cni/net.d", "CNI configuration directory")
	confName := flag.String("conf-name", "10-meshnet.conflist", "file name of the conflist")
	rewrite := flag.Duration("rewrite-interval", 0, "rewrite the conflist this often even when unchanged (0: only on change)")
	resync := flag.Duration("resync", 30*time.Second, "full reconcile period")
	flag.Parse()

	nodeName := os.Getenv("NODE_NAME")
	if nodeName == "" {
		log.Fatal("NODE_NAME is not set")
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatalf("in-cluster config: %v", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatalf("client: %v", err)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()

	factory := informers.NewSharedInformerFactory(cs, 0)
	nodes := factory.Core().V1().Nodes()
	kick := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(_, n any) { poke(n) },
		DeleteFunc: poke,
	}); err != nil {
		log.Fatalf("node informer: %v", err) //nolint:gocritic // the process ends: nothing for cancel to undo
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	r := &reconciler{
		nodeName: nodeName,
		confPath: *confDir + "/" + *confName,
		lister:   nodes.Lister(),
	}
	tick := time.NewTicker(*resync)
	defer tick.Stop()
	r.rewrite = *rewrite
	second := time.NewTicker(time.Second)
	defer second.Stop()
	log.Printf("meshnet on node %s, conflist %s", nodeName, r.confPath)
	r.reconcile(true)
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
			r.reconcile(false)
		case <-tick.C:
			r.reconcile(false)
		case <-second.C:
			if r.rewriteDue() {
				r.reconcile(true)
			}
		}
	}
}
