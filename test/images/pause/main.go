// Command gridsync-pause is the node tests' pod sandbox: it holds a pod's
// namespaces until it is told to stop, and reaps the orphans it inherits
// as PID 1 of a pod that shares its process namespace. It is what the
// Kubernetes pause image does, built here so that no image is pulled.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
