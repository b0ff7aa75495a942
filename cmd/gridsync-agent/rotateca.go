package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/gridsync/gridsync/internal/cli/rotateca"
)

const rotateCACommand = "rotate-ca"

// rotateCA is `gridsync-agent rotate-ca --network N --stage add|switch|retire`,
// run against the issuer's cluster with the operator's own credentials.
func rotateCA(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(binary+" "+rotateCACommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	network := fs.String("network", "", "the GridNetwork whose grid CA is rotated (required)")
	stage := fs.String("stage", "", "add (a new CA beside the old), switch (the new CA issues, every site renews) or retire (the old CA goes) (required)")
	force := fs.Bool("force", false, "write the stage even when the network's status says not every site is ready for it")
	settle := fs.Duration("settle", 2*time.Minute, "switch only once the new CA was added this long ago: the kubelet projects the sites' new ca.crt into their gateways' and listeners' pods within a minute or so")
	noWait := fs.Bool("no-wait", false, "return once the CA Secret is written, without waiting for every site")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait for the stage to reach every site")
	kubecfg := fs.String("kubeconfig", "", "kubeconfig of the issuer's cluster (default: KUBECONFIG, then in-cluster)")
	if code, done := parseCommand(fs, args); done {
		return code
	}
	if *network == "" || *stage == "" {
		fmt.Fprintf(stderr, "%s %s: --network and --stage are required\n", binary, rotateCACommand)
		return 2
	}
	c, err := operatorClient(*kubecfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, rotateCACommand, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := rotateca.Run(ctx, c, rotateca.Options{Network: *network, Stage: *stage, Force: *force, Settle: *settle, NoWait: *noWait, Out: stdout}); err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, rotateCACommand, err)
		return 1
	}
	return 0
}
