package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/internal/cli/infracert"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

const infraCertCommand = "issue-infra-cert"

// dnsNames is a repeatable --dns-name.
type dnsNames []string

func (d *dnsNames) String() string { return strings.Join(*d, ",") }
func (d *dnsNames) Set(v string) error {
	*d = append(*d, v)
	return nil
}

// issueInfraCert is `gridsync-agent issue-infra-cert --network N
// --dns-name D [--dns-name D2] --secret S`, run against the issuer's
// cluster with the operator's own credentials.
func issueInfraCert(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(binary+" "+infraCertCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	network := fs.String("network", "", "the GridNetwork whose grid CA signs (required; its caSecretRef must hold the CA's key: the issuer's cluster)")
	var names dnsNames
	fs.Var(&names, "dns-name", "a DNS name of the certificate, repeatable; the first is its subject (required; none under ."+sitetrust.TrustDomain+")")
	namespace := fs.String("namespace", os.Getenv("POD_NAMESPACE"), "the namespace of the Secret written (required)")
	secret := fs.String("secret", "", "the Secret the certificate is written to: tls.crt, tls.key, ca.crt (required; one this command wrote is reissued, any other is left alone)")
	lifetime := fs.Duration("lifetime", sitetrust.DefaultInfrastructureLifetime, "how long the certificate is valid (never past the grid CA)")
	kubecfg := fs.String("kubeconfig", "", "kubeconfig of the issuer's cluster (default: KUBECONFIG, then in-cluster)")
	if code, done := parseCommand(fs, args); done {
		return code
	}
	if *network == "" || len(names) == 0 || *namespace == "" || *secret == "" {
		fmt.Fprintf(stderr, "%s %s: --network, --dns-name, --namespace and --secret are required\n", binary, infraCertCommand)
		return 2
	}
	if *lifetime < 0 {
		fmt.Fprintf(stderr, "%s %s: --lifetime %s is negative: give a positive duration, or 0 for the default of %s\n",
			binary, infraCertCommand, *lifetime, sitetrust.DefaultInfrastructureLifetime)
		return 2
	}
	if err := sitetrust.ValidInfrastructureNames(names); err != nil {
		fmt.Fprintf(stderr, "%s %s: --dns-name: %v\n", binary, infraCertCommand, err)
		return 2
	}
	c, err := operatorClient(*kubecfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, infraCertCommand, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = infracert.Run(ctx, c, infracert.Options{Network: *network, DNSNames: names, Lifetime: *lifetime,
		Secret: types.NamespacedName{Namespace: *namespace, Name: *secret}, Out: stdout})
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, infraCertCommand, err)
		return 1
	}
	return 0
}
