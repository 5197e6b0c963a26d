package main

import "time"

// The Go runtime sets its netpoller up (an epoll file and an eventfd) the
// first time a socket, pipe or timer needs it, and a process whose file
// limit leaves no room for them dies on the spot. A function timer needs
// it at once: set up here, before the verb starts, so that death comes
// before anything is touched, never between writing a pod's rules and
// answering the runtime (TestSocketLimit).
func init() { time.AfterFunc(time.Hour, func() {}).Stop() }
