package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/trust/enrol"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// The issuer's register of enrolled names, read and released by its
// operator with their own credentials (the token Secret's get and
// update), as enroll-token adds tokens.
const (
	releaseNameCommand     = "release-name"
	registeredSitesCommand = "registered-sites"
)

// shortKey is how many hex characters of a key's fingerprint are shown:
// enough to tell keys apart by eye.
const shortKey = 16

// tokenSecretFlags find the issuer's token Secret, as enroll-token's do.
type tokenSecretFlags struct {
	namespace, secret, kubeconfig *string
}

func addTokenSecretFlags(fs *flag.FlagSet) tokenSecretFlags {
	return tokenSecretFlags{
		namespace:  fs.String("namespace", os.Getenv("POD_NAMESPACE"), "the issuer agent's namespace, where the token Secret is (required; POD_NAMESPACE inside the agent's pod)"),
		secret:     fs.String("secret", enrol.DefaultTokenSecret, "the Secret the issuer agent reads tokens from and keeps its register in"),
		kubeconfig: fs.String("kubeconfig", "", "kubeconfig of the issuer's cluster (default: KUBECONFIG, then in-cluster)"),
	}
}

func (f tokenSecretFlags) tokens() (*enrol.Tokens, error) {
	c, err := operatorClient(*f.kubeconfig)
	if err != nil {
		return nil, err
	}
	return &enrol.Tokens{API: c, Namespace: *f.namespace, Name: *f.secret}, nil
}

// parseCommand parses a command's flags: 0 and done for -h, 2 and done
// for a bad flag.
func parseCommand(fs *flag.FlagSet, args []string) (code int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	return 0, false
}

// releaseName is `gridsync-agent release-name --network N --site S`: it
// releases site S's name in the issuer's register, so that a token for S
// enrols it under a new key (a site rebuilt, its key lost). The
// certificates issued to S before stop renewing. It prints what was
// released: the key's fingerprint (its start), the newest certificate's
// serial, and the tokens for S not yet spent, which can enrol it now.
func releaseName(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(binary+" "+releaseNameCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	network := fs.String("network", "", "the GridNetwork the site is registered in (required)")
	site := fs.String("site", "", "the site name to release (required)")
	secret := addTokenSecretFlags(fs)
	if code, done := parseCommand(fs, args); done {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "%s %s: %s\n", binary, releaseNameCommand, fmt.Sprintf(format, a...))
		return code
	}
	if *network == "" || *site == "" || *secret.namespace == "" {
		return fail(2, "--network, --site and --namespace are required")
	}
	if err := sitetrust.ValidSiteName(*site); err != nil {
		return fail(2, "%v", err)
	}
	tokens, err := secret.tokens()
	if err != nil {
		return fail(1, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	released, err := tokens.Release(ctx, *network, *site, time.Now())
	if err != nil {
		return fail(1, "%v", err)
	}
	writeReleased(stdout, released)
	return 0
}

// writeReleased says what a release released, and what can enrol the
// name now: never a token, only its id.
func writeReleased(w io.Writer, r enrol.Released) {
	rec := r.Record
	if rec.KeyFingerprint == "" {
		fmt.Fprintf(w, "released site %s of network %s (its record did not parse)\n", rec.Site, rec.Network)
	} else {
		fmt.Fprintf(w, "released site %s of network %s: key sha256:%s…, serial %s, enrolled %s with token %s\n",
			rec.Site, rec.Network, short(rec.KeyFingerprint), orDash(rec.Serial), when(rec.EnrolledAt), orUnknown(rec.TokenID))
	}
	fmt.Fprintf(w, "the certificates issued to %s no longer renew; a token for %s (%s enroll-token) enrols the name under a new key\n", rec.Site, rec.Site, binary)
	for _, p := range r.Pending {
		fmt.Fprintf(w, "token %s for %s, not yet spent, enrols it from now on (until %s)\n", p.ID, rec.Site, p.Expires.UTC().Format(time.RFC3339))
	}
}

// registeredSites is `gridsync-agent registered-sites --network N`: the
// issuer's register of network N, one site a line.
func registeredSites(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(binary+" "+registeredSitesCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	network := fs.String("network", "", "the GridNetwork whose register is listed (required)")
	secret := addTokenSecretFlags(fs)
	if code, done := parseCommand(fs, args); done {
		return code
	}
	if *network == "" || *secret.namespace == "" {
		fmt.Fprintf(stderr, "%s %s: --network and --namespace are required\n", binary, registeredSitesCommand)
		return 2
	}
	tokens, err := secret.tokens()
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, registeredSitesCommand, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evicted, err := evictedSites(ctx, tokens.API, *network)
	if err != nil {
		// The register is the token Secret's; the evictions are the
		// network's, which these credentials may not read.
		fmt.Fprintf(stderr, "%s %s: the EVICTED column is unknown: %v\n", binary, registeredSitesCommand, err)
	}
	if err := listRegister(ctx, tokens, *network, evicted, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, registeredSitesCommand, err)
		return 1
	}
	return 0
}

// listRegister prints network's register, marking the sites evicted
// lists (nil: unknown).
func listRegister(ctx context.Context, tokens *enrol.Tokens, network string, evicted []string, stdout, stderr io.Writer) error {
	sites, unreadable, err := tokens.Registered(ctx, network, evicted)
	if err != nil {
		return err
	}
	if unreadable > 0 {
		fmt.Fprintf(stderr, "%d records of the register do not parse (of any network; %s releases one by its site name)\n", unreadable, releaseNameCommand)
	}
	if len(sites) == 0 {
		fmt.Fprintf(stderr, "no site is registered in network %s\n", network)
		return nil
	}
	writeRegister(stdout, sites, evicted != nil)
	return nil
}

// writeRegister prints the register as a table. A site whose enrolment
// is under way has no certificate yet: no serial, no expiry.
func writeRegister(w io.Writer, sites []enrol.RegisteredSite, evictionsKnown bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "SITE\tKEY (SHA-256)\tSERIAL\tENROLLED AT\tTOKEN ID\tNOT AFTER\tEVICTED")
	for _, s := range sites {
		evicted := "no"
		switch {
		case !evictionsKnown:
			evicted = "unknown"
		case s.Evicted:
			evicted = "yes"
		}
		notAfter := "-"
		if s.Serial != "" {
			notAfter = s.NotAfter.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s…\t%s\t%s\t%s\t%s\t%s\n", s.Site, short(s.KeyFingerprint), orDash(s.Serial), when(s.EnrolledAt), orUnknown(s.TokenID), notAfter, evicted)
	}
	_ = tw.Flush()
}

func short(fingerprint string) string { return fingerprint[:min(len(fingerprint), shortKey)] }

func when(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return t.UTC().Format(time.RFC3339)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// evictedSites are the sites network evicts: those its signed trust
// bundle lists, and those its spec lists that the issuer has not signed
// yet.
func evictedSites(ctx context.Context, api client.Reader, network string) ([]string, error) {
	var n v1alpha1.GridNetwork
	if err := api.Get(ctx, types.NamespacedName{Name: network}, &n); err != nil {
		return nil, fmt.Errorf("reading GridNetwork %s: %w", network, err)
	}
	out := []string{}
	if tb := n.Status.TrustBundle; tb != nil {
		out = append(out, tb.EvictedSites...)
	}
	if t := n.Spec.TLS; t != nil && t.SiteCertificate != nil {
		out = append(out, t.SiteCertificate.EvictedSites...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
