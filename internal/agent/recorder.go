package agent

import (
	"context"
	"fmt"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/kubernetes/scheme"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
)

// EventComponent is the reporting controller of the agent's Events.
const EventComponent = "mesh-cni-agent"

// NewEventRecorder records events.k8s.io/v1 Events as EventComponent from
// node until ctx ends. client-go's recorder writes "<controller>-<hostname>"
// as the reporting instance; the node's name is written instead, since the
// hostname need not be the node's name and the chart's own-node admission
// policy accepts the agent's Events only from its own node.
func NewEventRecorder(ctx context.Context, client eventsv1client.EventsV1Interface, node string) (events.EventRecorder, error) {
	b := events.NewBroadcaster(nodeSink{EventSink: &events.EventSinkImpl{Interface: client}, node: node})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		return nil, fmt.Errorf("start the events broadcaster: %w", err)
	}
	go func() {
		<-ctx.Done()
		b.Shutdown()
	}()
	return b.NewRecorder(scheme.Scheme, EventComponent), nil
}

// nodeSink writes the node's name as each Event's reporting instance.
type nodeSink struct {
	events.EventSink
	node string
}

func (s nodeSink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	e.ReportingInstance = s.node
	return s.EventSink.Create(ctx, e)
}

func (s nodeSink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	e.ReportingInstance = s.node
	return s.EventSink.Update(ctx, e)
}
