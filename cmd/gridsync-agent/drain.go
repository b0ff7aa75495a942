package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/internal/cli/drain"
	"github.com/gridsync/gridsync/shared/kubeconfig"
)

// drainCommand drains a provider and waits for the rollout evidence.
const drainCommand = "drain"

// drainProvider is `gridsync-agent drain --provider P [--undrain]`: it
// sets the provider's spec.trafficPolicy.drain, with the operator's own
// credentials, and waits until every consumer gateway of its network at
// this site serves a revision that lists it so (its pods reporting it),
// saying when each did.
func drainProvider(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(binary+" "+drainCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	provider := fs.String("provider", "", "the InferenceProvider to drain (required)")
	undrain := fs.Bool("undrain", false, "take new sessions again instead")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long to wait for every gateway's pods")
	kubecfg := fs.String("kubeconfig", "", "kubeconfig of the provider's cluster (default: KUBECONFIG, then in-cluster)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *provider == "" {
		fmt.Fprintf(stderr, "%s %s: --provider is required\n", binary, drainCommand)
		return 2
	}
	c, err := operatorClient(*kubecfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, drainCommand, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := drain.Run(ctx, c, drain.Options{Provider: *provider, Undrain: *undrain, Out: stdout}); err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, drainCommand, err)
		return 1
	}
	return 0
}

// operatorClient is the API client of a command run by an operator, with
// their own credentials, knowing the Grid API.
func operatorClient(kubecfg string) (client.Client, error) {
	rc, err := kubeconfig.Load(kubecfg, binary+"/"+version)
	if err != nil {
		return nil, err
	}
	scheme, err := controller.Scheme()
	if err != nil {
		return nil, err
	}
	return client.New(rc, client.Options{Scheme: scheme})
}
