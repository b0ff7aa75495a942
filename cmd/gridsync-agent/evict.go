package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/gridsync/gridsync/internal/cli/evict"
	"github.com/gridsync/gridsync/trust/enrol"
)

const evictCommand = "evict"

// evictSite is `gridsync-agent evict --network N --site S [--lift]`, run
// against the issuer's cluster with the operator's own credentials.
func evictSite(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(binary+" "+evictCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	network := fs.String("network", "", "the GridNetwork to evict the site from (required)")
	site := fs.String("site", "", "the site to evict (required)")
	lift := fs.Bool("lift", false, "lift the site's eviction instead, and release its name in the register (with --namespace): it comes back by enrolling again with a new token")
	noWait := fs.Bool("no-wait", false, "return once the spec is written, without waiting for the issuer to sign the trust bundle")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for the issuer's signature")
	secret := addTokenSecretFlags(fs)
	if code, done := parseCommand(fs, args); done {
		return code
	}
	if *network == "" || *site == "" {
		fmt.Fprintf(stderr, "%s %s: --network and --site are required\n", binary, evictCommand)
		return 2
	}
	c, err := operatorClient(*secret.kubeconfig)
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
	if *lift {
		return releaseLifted(ctx, &enrol.Tokens{API: c, Namespace: *secret.namespace, Name: *secret.secret}, *network, *site, stdout, stderr)
	}
	return 0
}

// releaseLifted releases a lifted site's name, so that it comes back by
// enrolling under a new key with a new token (its old key is presumed
// lost with the trust that evicted it).
func releaseLifted(ctx context.Context, tokens *enrol.Tokens, network, site string, stdout, stderr io.Writer) int {
	if tokens.Namespace == "" {
		fmt.Fprintf(stderr, "the name %s stays registered under its old key: release it with %s %s, or give --namespace\n", site, binary, releaseNameCommand)
		return 0
	}
	released, err := tokens.Release(ctx, network, site, time.Now())
	switch {
	case errors.Is(err, enrol.ErrNotRegistered):
		fmt.Fprintf(stdout, "the name %s was not registered: a token for it enrols it\n", site)
	case err != nil:
		fmt.Fprintf(stderr, "%s %s: the eviction is lifted, but the name is not released: %v\n", binary, evictCommand, err)
		return 1
	default:
		writeReleased(stdout, released)
	}
	return 0
}
