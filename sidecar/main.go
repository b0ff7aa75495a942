// Command gridsync-sidecar is the overlay-sync sidecar of a Praxis gateway
// pod. Today it offers the offline check of envelope files:
//
//	gridsync-sidecar validate [flags] FILE...
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Exit codes shared by the subcommands.
const (
	exitOK       = 0
	exitRejected = 1
	exitUsage    = 2
)

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "validate":
		return runValidate(args[1:], stdin, stdout, stderr)
	case "-h", "--help", "help":
		usage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "gridsync-sidecar: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Usage: gridsync-sidecar <command> [flags]

Commands:
  validate   check overlay envelope files offline, one JSON line per file

Run 'gridsync-sidecar validate -h' for the flags of a command.
`)
}
