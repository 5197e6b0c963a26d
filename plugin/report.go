package main

import (
	"encoding/json"
	"net"
	"time"

	"github.com/mesh-cni/mesh-cni/pkg/config"
	"github.com/mesh-cni/mesh-cni/pkg/node"
)

// reportDeadline bounds the whole report: the agent's metrics are never
// worth slowing a pod down.
const reportDeadline = 20 * time.Millisecond

// report sends ev to the agent's unixgram socket. It never blocks for long
// and never fails the verb: a missing agent or a full queue drops the event.
func report(path string, ev node.Event, start time.Time) {
	ev.Seconds = time.Since(start).Seconds()
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	c, err := net.DialTimeout("unixgram", path, reportDeadline)
	if err != nil {
		return
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(reportDeadline))
	_, _ = c.Write(b)
}

// failed marks ev as failed with err's text, which the agent puts in a
// Warning Event on the pod, and returns err.
func failed(ev *node.Event, err error) error {
	ev.Decision, ev.Message = "failed", config.Clip(err.Error())
	return err
}
