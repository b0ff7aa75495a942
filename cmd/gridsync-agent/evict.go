package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/gridsync/gridsync/internal/cli/evict"
)

const evictCommand = "evict"

// evictSite is `gridsync-agent evict --network N --site S [--lift]`, run
// against the issuer's cluster with the operator's own credentials.
func evictSite(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(binary+" "+evictCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	network := fs.String("network", "", "the GridNetwork to evict the site from (required)")
	site := fs.String("site", "", "the site to evict (required)")
	lift := fs.Bool("lift", false, "lift the site's eviction instead: it comes back by enrolling again with a new token")
	noWait := fs.Bool("no-wait", false, "return once the spec is written, without waiting for the issuer to sign the trust bundle")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for the issuer's signature")
	kubecfg := fs.String("kubeconfig", "", "kubeconfig of the issuer's cluster (default: KUBECONFIG, then in-cluster)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *network == "" || *site == "" {
		fmt.Fprintf(stderr, "%s %s: --network and --site are required\n", binary, evictCommand)
		return 2
	}
	c, err := operatorClient(*kubecfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, evictCommand, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := evict.Run(ctx, c, evict.Options{Network: *network, Site: *site, Lift: *lift, NoWait: *noWait, Out: stdout}); err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, evictCommand, err)
		return 1
	}
	return 0
}
