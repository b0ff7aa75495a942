package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/gridsync/gridsync/trust/enrol"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// enrollTokenCommand creates a one-time enrolment token at the issuer.
const enrollTokenCommand = "enroll-token"

// enrollToken is `gridsync-agent enroll-token --network N --site S`: it
// stores a new token, hashed, in the issuer agent's token Secret, with
// the operator's own credentials, and prints it once. The token lets one
// certificate request for site S in network N through, until it expires.
func enrollToken(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(binary+" "+enrollTokenCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	network := fs.String("network", "", "the GridNetwork the site enrols in (required)")
	site := fs.String("site", "", "the site name the token is for: the only name it can enrol (required)")
	ttl := fs.Duration("ttl", enrol.DefaultTokenTTL, fmt.Sprintf("how long the token can be used (at most %s)", enrol.MaxTokenTTL))
	secret := addTokenSecretFlags(fs)
	if code, done := parseCommand(fs, args); done {
		return code
	}
	namespace := secret.namespace
	if *network == "" || *site == "" || *namespace == "" {
		fmt.Fprintf(stderr, "%s %s: --network, --site and --namespace are required\n", binary, enrollTokenCommand)
		return 2
	}
	if err := sitetrust.ValidSiteName(*site); err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, enrollTokenCommand, err)
		return 2
	}
	tokens, err := secret.tokens()
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, enrollTokenCommand, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	token, err := tokens.Add(ctx, *network, *site, *ttl, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, enrollTokenCommand, err)
		return 1
	}
	fmt.Fprintln(stdout, token)
	// A token does not take a registered name from the key it is
	// registered under: said now rather than when the site is refused.
	if rec, err := tokens.Record(ctx, *network, *site); err == nil && rec != nil && rec.ReleasedAt.IsZero() {
		fmt.Fprintf(stderr, "site %s is registered under key sha256:%s…: this token enrols it under that key only (%s %s releases the name for a new key)\n",
			*site, short(rec.KeyFingerprint), binary, releaseNameCommand)
	}
	// The token's id (never the token) is what the register shows of the
	// token a site enrolled with.
	fmt.Fprintf(stderr, "a token for site %s in network %s (token id %s), usable once until %s: give it to that site's operator as the Secret its spec.tls.siteCertificate.enrollmentTokenSecretRef names\n",
		*site, *network, enrol.TokenID(token), time.Now().Add(*ttl).UTC().Format(time.RFC3339))
	return 0
}
