package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/gridsync/gridsync/internal/cli/resetkey"
)

const resetSiteKeyCommand = "reset-site-key"

// resetSiteKey is `gridsync-agent reset-site-key --network N --site S`,
// run against a site's own cluster with its operator's credentials: in a
// network without a grid CA, that site forgets the key site S's records
// are held to, and binds the next key that signs them.
func resetSiteKey(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(binary+" "+resetSiteKeyCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	network := fs.String("network", "", "the GridNetwork, without a grid CA (required)")
	site := fs.String("site", "", "the remote site whose key is forgotten here (required)")
	noWait := fs.Bool("no-wait", false, "return once the request is written, without waiting for the agent to apply it")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for the agent")
	kubecfg := fs.String("kubeconfig", "", "kubeconfig of this site's cluster (default: KUBECONFIG, then in-cluster)")
	if code, done := parseCommand(fs, args); done {
		return code
	}
	if *network == "" || *site == "" {
		fmt.Fprintf(stderr, "%s %s: --network and --site are required\n", binary, resetSiteKeyCommand)
		return 2
	}
	c, err := operatorClient(*kubecfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, resetSiteKeyCommand, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := resetkey.Run(ctx, c, resetkey.Options{Network: *network, Site: *site, NoWait: *noWait, Out: stdout}); err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, resetSiteKeyCommand, err)
		return 1
	}
	return 0
}
