package main

import (
	"encoding/json"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mesh-cni/mesh-cni/internal/backend/nftables"
	"github.com/mesh-cni/mesh-cni/internal/config"
	"github.com/mesh-cni/mesh-cni/internal/node"
)

// beforeSend, when set, runs between connecting and sending: tests stall
// there as a descheduled plugin on a loaded node would.
var beforeSend func()

// report sends ev to the agent's unixgram socket. It never waits and never
// fails the verb: a missing agent or a full queue drops the event. It has
// no deadline either: on a loaded node a deadline expires while the
// plugin is not even running, and the dropped report would have been a
// pod's Warning Event.
//
// The datagram carries the verb's nf_tables sockets (nftables.KeepSockets):
// the agent closes them later (internal/agent/passedfds.go), so the kernel's
// wait on the last close (~10 ms after a deletion) is neither the plugin's
// nor the primary's, whose DEL would wait for it too. Without an agent
// they are closed here.
func report(path string, ev node.Event, start time.Time) {
	fds := nftables.TakeSockets()
	defer func() {
		for _, fd := range fds {
			unix.Close(fd) // passed: the agent holds its own
		}
	}()
	ev.Seconds = time.Since(start).Seconds()
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	// Raw syscalls, not package net: no netpoller, whose set-up needs
	// two more files and is fatal to the process when the file limit is
	// reached, and no timer (a timer sets the netpoller up too).
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	// connect(2) on a datagram socket does not wait.
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return
	}
	if beforeSend != nil {
		beforeSend()
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	// One try: a full queue is EAGAIN and drops the event.
	_ = unix.Sendmsg(fd, b, oob, nil, unix.MSG_DONTWAIT)
}

// failed marks ev as failed with err's text, which the agent puts in a
// Warning Event on the pod, and returns err.
func failed(ev *node.Event, err error) error {
	ev.Decision, ev.Message = "failed", config.Clip(err.Error())
	return err
}
