package sitetrust

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultInfrastructureLifetime is how long an infrastructure certificate
// is valid unless said otherwise: it is issued by hand, so it is not
// renewed every day as a site's is.
const DefaultInfrastructureLifetime = 90 * 24 * time.Hour

// IssueInfrastructure signs an infrastructure certificate: one for a
// database or a serving listener that shares the grid CA, as the
// reference issues them. It carries no organization and no SPIFFE SAN, so
// it names no site on either axis and matches no organization entry: the
// signals listener reads it as anonymous and a site probe refuses it.
// The subject is the first DNS name, the SANs the DNS names; critical
// CA:FALSE, critical key usage digital signature only, server and client
// authentication. A name in the sites' domain (<site>.grid.internal) is
// refused: a probe checks a site's gateway by that name. It returns the
// chain (leaf then CA) and the new key, PEM. The leaf never outlives the
// CA; a lifetime of 0 is DefaultInfrastructureLifetime, a negative one
// is refused.
func (ca *CA) IssueInfrastructure(dnsNames []string, now time.Time, lifetime time.Duration) (chainPEM, keyPEM []byte, err error) {
	if err := ValidInfrastructureNames(dnsNames); err != nil {
		return nil, nil, err
	}
	switch {
	case lifetime < 0: // never silently the default: a caller's mistake
		return nil, nil, fmt.Errorf("the lifetime %s is negative", lifetime)
	case lifetime == 0:
		lifetime = DefaultInfrastructureLifetime
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: dnsNames[0]},
		NotBefore:             now.Add(-backdate(lifetime)),
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		IsCA:                  false,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:              dnsNames,
	}
	der, keyPEM, err := sign(tmpl, ca.Cert, ca.key)
	if err != nil {
		return nil, nil, err
	}
	return append(pemBlock("CERTIFICATE", der), pemBlock("CERTIFICATE", ca.Cert.Raw)...), keyPEM, nil
}

// ValidInfrastructureNames reports why dnsNames cannot name an
// infrastructure certificate: at least one, each a lowercase DNS name
// (no wildcard), none in the sites' domain.
func ValidInfrastructureNames(dnsNames []string) error {
	if len(dnsNames) == 0 {
		return errors.New("an infrastructure certificate needs at least one DNS name")
	}
	for _, n := range dnsNames {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			return fmt.Errorf("DNS name %q is not a lowercase DNS name: %s", n, strings.Join(errs, "; "))
		}
		if n == TrustDomain || strings.HasSuffix(n, "."+TrustDomain) {
			return fmt.Errorf("DNS name %q is in the sites' domain %s: a site is probed by that name, and an infrastructure certificate names no site", n, TrustDomain)
		}
	}
	return nil
}

// NamesNoSite reports whether a leaf names no site on either axis: no
// organization and no SPIFFE ID. An infrastructure certificate is one:
// the grid CA signed it, and it stands for no site anywhere it is checked.
func NamesNoSite(leaf *x509.Certificate) bool {
	return len(leaf.Subject.Organization) == 0 && len(leaf.URIs) == 0
}
