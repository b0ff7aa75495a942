// Command gridsync-sidecar is the overlay-sync sidecar of a Praxis gateway
// pod: it watches the gateway's overlay ConfigMap through the Kubernetes
// API, validates every envelope and atomically publishes accepted ones
// into the volume it shares with the gateway. It is a drop-in replacement
// for the upstream sidecar (same flags, environment, endpoints and
// metrics).
//
//	gridsync-sidecar [flags]                 run the sidecar
//	gridsync-sidecar validate [flags] FILE   check envelope files offline
//	gridsync-sidecar probe URL               GET a URL, exit 0 on 2xx (for images without curl)
package main

import (
	"io"
	"os"

	"github.com/gridsync/gridsync/shared/health"
)

// version is stamped by the build (make build).
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK       = 0
	exitFailure  = 1 // the sidecar failed
	exitRejected = 1 // validate rejected a file
	exitUsage    = 2
)

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "validate" {
		return runValidate(args[1:], stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "probe" {
		return health.Probe(binary, args[1:], stdout, stderr)
	}
	return runSidecar(args, stderr)
}
