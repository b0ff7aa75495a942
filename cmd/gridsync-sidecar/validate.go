package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/gridsync/gridsync/cmd/gridsync-sidecar/internal/check"
	"github.com/gridsync/gridsync/shared/envelope"
)

// runValidate is `gridsync-sidecar validate`: exit 0 when every file is
// accepted, 1 when any is rejected, 2 on a usage error.
func runValidate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts envelope.Options
	fs.StringVar(&opts.Expect.Network, "expected-network", "", "reject envelopes for another network (not checked when empty)")
	fs.StringVar(&opts.Expect.Gateway, "expected-gateway", "", "reject envelopes for another gateway (not checked when empty)")
	fs.StringVar(&opts.Expect.Namespace, "expected-namespace", "", "reject envelopes for another namespace (not checked when empty)")
	fs.StringVar(&opts.Expect.LocalSite, "expected-local-site", "", "reject envelopes for another local site (not checked when empty)")
	fs.IntVar(&opts.MaxBytes, "max-bytes", envelope.DefaultMaxBytes, "reject files larger than this many bytes")
	fs.BoolVar(&opts.AcceptLegacy, "accept-legacy", false, "accept a bare overlay without an envelope")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: gridsync-sidecar validate [flags] FILE...

Validates overlay envelope files as the sidecar does (size, schema, scope,
sha256 digest) and prints one JSON line per file:
  {"file":"...","decision":"accept"|"reject","reason":"...","revision":"..."}
FILE "-" reads standard input. Exit status: 0 all accepted, 1 any rejected,
2 usage error.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if opts.MaxBytes <= 0 {
		fmt.Fprintf(stderr, "validate: --max-bytes must be positive, got %d\n", opts.MaxBytes)
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "validate: no FILE given")
		fs.Usage()
		return exitUsage
	}
	allAccepted, err := check.Files(stdout, stdin, opts, fs.Args())
	if err != nil {
		fmt.Fprintf(stderr, "validate: %v\n", err)
		return exitRejected
	}
	if !allAccepted {
		return exitRejected
	}
	return exitOK
}
