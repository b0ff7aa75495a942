package sitetrust

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/gridsync/gridsync/shared/keypolicy"
)

// Held is a site certificate as its Secret holds it.
type Held struct {
	Leaf *x509.Certificate
	// Pair is the chain and key, for the probe's client authentication.
	Pair tls.Certificate
}

// ParseHeld reads a site Secret's tls.crt (leaf then chain) and tls.key,
// and checks that they belong together. Errors never quote the key.
func ParseHeld(chainPEM, keyPEM []byte) (*Held, error) {
	certs, err := ParseCertificates(chainPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.crt: %w", err)
	}
	// Keys of a kind and size gridsync accepts, before any signature made
	// with them is checked (the probes and peers verify with this chain).
	if err := keypolicy.CheckChain(certs); err != nil {
		return nil, fmt.Errorf("tls.crt: %w", err)
	}
	if len(keyPEM) == 0 {
		return nil, errors.New("tls.key is empty")
	}
	pair, err := tls.X509KeyPair(chainPEM, keyPEM)
	if err != nil {
		// The standard library's messages name the PEM types only.
		return nil, fmt.Errorf("tls.crt and tls.key do not make a pair: %w", err)
	}
	return &Held{Leaf: certs[0], Pair: pair}, nil
}

// ReissueReason says why the agent issues a new site certificate instead
// of keeping held: it does not chain to the CA, does not have the profile
// for site, or is past its renewal point. "" keeps it.
func ReissueReason(held *Held, ca *x509.Certificate, site string, now time.Time) string {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := held.Leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return "it is not valid under the grid CA now"
	}
	if err := CheckSVID(held.Leaf, site); err != nil {
		return "it lacks the site profile: " + err.Error()
	}
	if !now.Before(RenewAt(held.Leaf)) {
		return "two thirds of its lifetime have passed"
	}
	return ""
}
