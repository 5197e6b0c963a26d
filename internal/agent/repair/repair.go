// Package repair finds the pods on this node that should be meshed but
// started without redirection (their validator init container failed with
// its "not redirected" exit code), and repairs them by policy: evict through
// the Eviction API (PodDisruptionBudgets respected), delete, or label.
//
// A new pod of the same owner then goes through the (now chained) plugin.
// Every action emits an Event on the pod. Actions are rate-limited and
// failures retried with exponential back-off, never in a hot loop.
package repair

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"

	"github.com/mesh-cni/mesh-cni/internal/agent/nodepods"
)

// Policy says how a broken pod is repaired.
type Policy string

const (
	// Evict uses the Eviction API: PodDisruptionBudgets are respected, a
	// blocked eviction (429) is retried later, never forced.
	Evict Policy = "evict"
	// Delete deletes the pod (UID precondition), ignoring budgets.
	Delete Policy = "delete"
	// Label only marks the pod (Label), for people or other tools to act on.
	Label Policy = "label"
)

// Outcome of one repair attempt, for metrics.
type Outcome string

const (
	Repaired Outcome = "repaired"
	Blocked  Outcome = "blocked" // eviction refused by a PodDisruptionBudget
	Failed   Outcome = "failed"
)

// DefaultLabel is what the label policy sets.
const DefaultLabel = "mesh-cni.io/uninitialized=true"

// EventComponent is the source of the Events on repaired pods.
const EventComponent = "mesh-cni-repair"

// Options configure Run. Zero values take the defaults noted.
type Options struct {
	NodeName string
	Policy   Policy // default Evict
	Label    string // "key=value" for the label policy; default DefaultLabel
	// Validators recognised; default DefaultValidators().
	Validators []Validator
	// LabelSelector limits the pods repaired (e.g. meshed namespaces only).
	LabelSelector string
	// Pods is the node's shared pod informer (nodepods.New), run by the
	// caller; nil = Run builds and runs one of its own.
	Pods cache.SharedIndexInformer
	// RetryBase and RetryMax bound the per-pod back-off after a failed or
	// blocked attempt; default 1s and 5m.
	RetryBase, RetryMax time.Duration
	// ActionsPerSecond and Burst bound the API writes of all repairs
	// together; default 1 and 5.
	ActionsPerSecond float32
	Burst            int
	// OnAttempt, when set, is called after each repair attempt (metrics).
	OnAttempt func(Policy, Outcome)
	// Log defaults to slog.Default().
	Log *slog.Logger
}

func (o *Options) defaults() error {
	if o.NodeName == "" {
		return fmt.Errorf("repair: node name is empty")
	}
	if o.Policy == "" {
		o.Policy = Evict
	}
	switch o.Policy {
	case Evict, Delete, Label:
	default:
		return fmt.Errorf("repair: unknown policy %q (evict, delete or label)", o.Policy)
	}
	if o.Label == "" {
		o.Label = DefaultLabel
	}
	if o.Policy == Label {
		k, v, ok := strings.Cut(o.Label, "=")
		if !ok {
			return fmt.Errorf("repair: label %q is not key=value", o.Label)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("repair: label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("repair: label value %q: %s", v, strings.Join(errs, "; "))
		}
	}
	if o.Validators == nil {
		o.Validators = DefaultValidators()
	}
	if o.RetryBase <= 0 {
		o.RetryBase = time.Second
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 5 * time.Minute
	}
	if o.ActionsPerSecond <= 0 {
		o.ActionsPerSecond = 1
	}
	if o.Burst <= 0 {
		o.Burst = 5
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return nil
}

func (o *Options) selector() (labels.Selector, error) {
	sel, err := labels.Parse(o.LabelSelector)
	if err != nil {
		return nil, fmt.Errorf("repair: label selector %q: %w", o.LabelSelector, err)
	}
	return sel, nil
}

type controller struct {
	opts     Options
	client   corev1client.CoreV1Interface
	selector labels.Selector
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	limiter  flowcontrol.RateLimiter
	recorder record.EventRecorder

	// repaired remembers the pods acted on: the cache can still show a
	// repaired pod as broken for a moment, and a second action (and Event)
	// would be noise. Entries go when the pod is deleted, or after an hour.
	mu       sync.Mutex
	repaired map[types.UID]time.Time
}

// Run watches the pods of opts.NodeName and repairs broken ones until ctx
// ends. It returns an error only for bad options.
func Run(ctx context.Context, client corev1client.CoreV1Interface, opts Options) error {
	if err := opts.defaults(); err != nil {
		return err
	}
	sel, err := opts.selector()
	if err != nil {
		return err
	}
	inf := opts.Pods
	if inf == nil {
		inf = nodepods.New(client, opts.NodeName)
		go inf.Run(ctx.Done())
	}
	c := &controller{
		opts:     opts,
		client:   client,
		selector: sel,
		informer: inf,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.RetryBase, opts.RetryMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "mesh-cni-repair"}),
		limiter:  flowcontrol.NewTokenBucketRateLimiter(opts.ActionsPerSecond, opts.Burst),
		repaired: map[types.UID]time.Time{},
	}
	reg, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.forget,
	})
	if err != nil {
		return fmt.Errorf("repair: pod informer: %w", err)
	}
	defer func() { _ = c.informer.RemoveEventHandler(reg) }()

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: client.Events("")})
	defer broadcaster.Shutdown()
	c.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventComponent, Host: opts.NodeName})

	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		c.queue.ShutDown()
		return nil // ctx ended first
	}
	opts.Log.Info("repair controller started", "node", opts.NodeName, "policy", opts.Policy)
	worker := make(chan struct{})
	go func() {
		defer close(worker)
		for c.next(ctx) {
		}
	}()
	<-ctx.Done()
	// The worker finishes its item before the event broadcaster stops.
	c.queue.ShutDown()
	<-worker
	return nil
}

func (c *controller) enqueue(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !c.selector.Matches(labels.Set(pod.Labels)) {
		return
	}
	if _, _, broken := Broken(pod, c.opts.Validators); !broken {
		return
	}
	if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
		c.queue.Add(key)
	}
}

func (c *controller) forget(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		c.mu.Lock()
		delete(c.repaired, pod.UID)
		c.mu.Unlock()
	}
}

// done reports whether pod was repaired already, and with mark records it.
func (c *controller) done(pod *corev1.Pod, mark bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for uid, at := range c.repaired {
		if now.Sub(at) > time.Hour {
			delete(c.repaired, uid)
		}
	}
	_, seen := c.repaired[pod.UID]
	if mark {
		c.repaired[pod.UID] = now
	}
	return seen
}

// next handles one queued pod; false once the queue is shut down.
func (c *controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	retry, err := c.handle(ctx, key)
	switch {
	case ctx.Err() != nil:
	case retry:
		if err != nil {
			c.opts.Log.Warn("repair failed; retrying", "pod", key, "err", err)
		}
		c.queue.AddRateLimited(key)
	default:
		c.queue.Forget(key)
	}
	return true
}
