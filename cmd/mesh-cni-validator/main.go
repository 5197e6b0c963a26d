// Command mesh-cni-validator proves, from inside a meshed pod before its
// proxy starts, that mesh-cni redirected the pod's outbound TCP. Run it as
// an init container under the application's UID (not the proxy's, which
// the rules exempt).
//
// It listens on the proxy's outbound port itself, then connects to a
// sentinel address no pod can reach (TEST-NET-1, 192.0.2.1:20001, or
// [2001:db8::1]:20001 with --ipv6). If the redirect is in place the
// connection lands on its own listener, which checks a random token sent
// through it and that SO_ORIGINAL_DST still names the sentinel (the proxy
// needs the original destination). Exit 0: redirected. Exit 97
// (node.ValidatorExitCode): not redirected; the repair controller acts on
// it. Exit 2: bad flags.
package main

import (
	"fmt"
	"os"
)

func main() {
	code, msg := run(os.Args[1:])
	if msg != "" {
		fmt.Fprintln(os.Stderr, msg)
		// Kubernetes shows this as the container's termination message.
		if code != 0 {
			_ = os.WriteFile("/dev/termination-log", []byte(msg), 0o644)
		}
	}
	os.Exit(code)
}
