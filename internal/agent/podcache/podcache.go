// Package podcache serves the pods of one node to the CNI plugin over a unix
// socket, from an informer cache, so a pod ADD needs no API call of its own.
//
//	GET /v1/pods/{namespace}/{name} -> 200 mesh.Pod JSON | 404 | 503
package podcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/mesh-cni/mesh-cni/internal/agent/nodepods"
	"github.com/mesh-cni/mesh-cni/internal/mesh"
)

// ErrNotFound means the pod does not exist (neither cached nor in the API).
var ErrNotFound = errors.New("pod not found")

// DefaultWait is how long a lookup waits for a pod missing from the cache to
// arrive through the watch before it asks the API server directly.
const DefaultWait = time.Second

// Cache is an informer over the pods bound to one node.
type Cache struct {
	pods     corev1client.PodsGetter
	informer cache.SharedIndexInformer
	owned    bool // Run runs the informer (New); a shared one runs elsewhere
	// Wait bounds the wait for a pod that is not cached yet; the request's
	// context bounds it too.
	Wait time.Duration

	mu      sync.Mutex
	waiters map[string][]chan struct{}
}

// New returns a cache of the pods whose spec.nodeName is node, on an
// informer of its own. Run starts it.
func New(pods corev1client.PodsGetter, node string) *Cache {
	c := NewShared(pods, nodepods.New(pods, node))
	c.owned = true
	return c
}

// NewShared returns a cache on the node's shared pod informer
// (nodepods.New), which the caller runs.
func NewShared(pods corev1client.PodsGetter, inf cache.SharedIndexInformer) *Cache {
	c := &Cache{pods: pods, informer: inf, Wait: DefaultWait, waiters: map[string][]chan struct{}{}}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.notify,
		UpdateFunc: func(_, obj any) { c.notify(obj) },
	})
	return c
}

// Run runs the informer, when the cache owns it, until ctx ends.
func (c *Cache) Run(ctx context.Context) {
	if c.owned {
		c.informer.Run(ctx.Done())
	}
}

// HasSynced reports whether the first list has been loaded.
func (c *Cache) HasSynced() bool { return c.informer.HasSynced() }

func (c *Cache) notify(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	c.mu.Lock()
	ws := c.waiters[key]
	delete(c.waiters, key)
	c.mu.Unlock()
	for _, w := range ws {
		close(w)
	}
}

func (c *Cache) cached(key string) *corev1.Pod {
	obj, ok, err := c.informer.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	p, _ := obj.(*corev1.Pod)
	return p
}

// Get returns the pod. One that is not cached (just created, or the cache is
// still loading) is waited for up to Wait, bounded by ctx, and then asked of
// the API server once. ErrNotFound when it does not exist.
//
// uid, when set, is the UID the runtime names (K8S_POD_UID): a cached pod
// of that name with another UID is an earlier pod (a StatefulSet pod
// recreated while the watch lags) and is treated as not cached yet. The
// answer may still carry another UID when the API server has one; the
// caller compares.
func (c *Cache) Get(ctx context.Context, namespace, name, uid string) (*mesh.Pod, error) {
	key := namespace + "/" + name
	if p := c.current(key, uid); p != nil {
		return FromPod(p), nil
	}
	timer := time.NewTimer(c.Wait)
	defer timer.Stop()
	for {
		// Register before the second look, so an arrival in between is not missed.
		ch := make(chan struct{})
		c.mu.Lock()
		c.waiters[key] = append(c.waiters[key], ch)
		c.mu.Unlock()
		p := c.current(key, uid)
		if p != nil {
			c.dropWaiter(key, ch)
			return FromPod(p), nil
		}
		select {
		case <-ch:
			continue // an event for this name: look again
		case <-timer.C:
		case <-ctx.Done():
			c.dropWaiter(key, ch)
			return nil, fmt.Errorf("pod %s: %w", key, ctx.Err())
		}
		c.dropWaiter(key, ch)
		break
	}
	p, err := c.pods.Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("pod %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get pod %s: %w", key, err)
	}
	return FromPod(p), nil
}

// current is the cached pod, when it is the one with uid (any, when uid is
// empty).
func (c *Cache) current(key, uid string) *corev1.Pod {
	p := c.cached(key)
	if p == nil || (uid != "" && string(p.UID) != uid) {
		return nil
	}
	return p
}

func (c *Cache) dropWaiter(key string, ch chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.waiters[key]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(c.waiters, key)
	} else {
		c.waiters[key] = ws
	}
}
