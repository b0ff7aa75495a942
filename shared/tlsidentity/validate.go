package tlsidentity

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"time"
)

// Material is the kind of material a reload concerns: the certificate
// chain with its key, or the CA bundle. It is a metric label.
type Material string

// Materials.
const (
	MaterialCertificate Material = "certificate"
	MaterialCABundle    Material = "ca_bundle"
)

// Reason is why a candidate identity was rejected; a closed set.
type Reason string

// Rejection reasons.
const (
	ReasonMissing       Reason = "missing"
	ReasonEmpty         Reason = "empty"
	ReasonOversized     Reason = "oversized"
	ReasonUnparseable   Reason = "unparseable"
	ReasonMismatch      Reason = "mismatch"
	ReasonExpired       Reason = "expired"
	ReasonNotYetValid   Reason = "not_yet_valid"
	ReasonUntrusted     Reason = "untrusted"
	ReasonNotServerAuth Reason = "not_server_auth"
)

// Rejection says why a candidate was refused. Detail names files and
// certificate subjects, never key material.
type Rejection struct {
	Material Material
	Reason   Reason
	Detail   string
}

func (r *Rejection) Error() string {
	return fmt.Sprintf("%s rejected (%s): %s", r.Material, r.Reason, r.Detail)
}

func rejection(m Material, reason Reason, detail string) *Rejection {
	return &Rejection{Material: m, Reason: reason, Detail: detail}
}

// Identity is a validated certificate chain, key and CA bundle.
type Identity struct {
	// Certificate is ready for a tls.Config; Leaf is parsed.
	Certificate tls.Certificate
	// CertPEM, KeyPEM and CAPEM are the bytes as read, for publication.
	CertPEM, KeyPEM, CAPEM []byte
	// Fingerprint is the sha256 of the leaf's DER, lowercase hex.
	Fingerprint string
	// NotAfter is the earliest expiry in the chain; CANotAfter the
	// earliest in the CA bundle (zero without one).
	NotAfter, CANotAfter time.Time
	// Generation is the projected generation it was read from.
	Generation string
}

// same reports whether two identities hold the same bytes.
func (id *Identity) same(other *Identity) bool {
	return other != nil && bytes.Equal(id.CertPEM, other.CertPEM) && bytes.Equal(id.KeyPEM, other.KeyPEM) && bytes.Equal(id.CAPEM, other.CAPEM)
}

// validate turns read material into an Identity, or says why not.
func validate(m material, now time.Time, requireServerAuth bool) (*Identity, *Rejection) {
	pair, err := tls.X509KeyPair(m.cert, m.key)
	if err != nil {
		// Tell a mismatch (the classic torn or half-rotated Secret) from
		// garbage.
		if parseChain(m.cert) != nil && parsesAsKey(m.key) {
			return nil, rejection(MaterialCertificate, ReasonMismatch, "the private key does not match the certificate")
		}
		return nil, rejection(MaterialCertificate, ReasonUnparseable, err.Error())
	}
	chain := make([]*x509.Certificate, 0, len(pair.Certificate))
	for _, der := range pair.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, rejection(MaterialCertificate, ReasonUnparseable, err.Error())
		}
		chain = append(chain, c)
	}
	leaf := chain[0]
	pair.Leaf = leaf
	id := &Identity{Certificate: pair, CertPEM: m.cert, KeyPEM: m.key, CAPEM: m.ca, Generation: m.generation}
	sum := sha256.Sum256(leaf.Raw)
	id.Fingerprint = hex.EncodeToString(sum[:])
	id.NotAfter = leaf.NotAfter
	for _, c := range chain {
		if rej := checkValidity(MaterialCertificate, c, now); rej != nil {
			return nil, rej
		}
		if c.NotAfter.Before(id.NotAfter) {
			id.NotAfter = c.NotAfter
		}
	}
	if requireServerAuth && !hasServerAuth(leaf) {
		return nil, rejection(MaterialCertificate, ReasonNotServerAuth, fmt.Sprintf("leaf %q has no server-auth usage", leaf.Subject.String()))
	}
	if m.ca != nil {
		roots := parseChain(m.ca)
		if roots == nil {
			return nil, rejection(MaterialCABundle, ReasonUnparseable, "no certificate in the CA bundle")
		}
		pool := x509.NewCertPool()
		for _, c := range roots {
			if rej := checkValidity(MaterialCABundle, c, now); rej != nil {
				return nil, rej
			}
			if id.CANotAfter.IsZero() || c.NotAfter.Before(id.CANotAfter) {
				id.CANotAfter = c.NotAfter
			}
			pool.AddCert(c)
		}
		intermediates := x509.NewCertPool()
		for _, c := range chain[1:] {
			intermediates.AddCert(c)
		}
		usage := x509.ExtKeyUsageAny
		if requireServerAuth {
			usage = x509.ExtKeyUsageServerAuth
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: intermediates, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return nil, rejection(MaterialCertificate, ReasonUntrusted, err.Error())
		}
	}
	return id, nil
}

func checkValidity(m Material, c *x509.Certificate, now time.Time) *Rejection {
	switch {
	case now.After(c.NotAfter):
		return rejection(m, ReasonExpired, fmt.Sprintf("%q expired at %s", c.Subject.String(), c.NotAfter.UTC().Format(time.RFC3339)))
	case now.Before(c.NotBefore):
		return rejection(m, ReasonNotYetValid, fmt.Sprintf("%q is valid from %s", c.Subject.String(), c.NotBefore.UTC().Format(time.RFC3339)))
	}
	return nil
}

func hasServerAuth(c *x509.Certificate) bool {
	if len(c.ExtKeyUsage) == 0 {
		return false
	}
	for _, u := range c.ExtKeyUsage {
		if u == x509.ExtKeyUsageServerAuth || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}

// parseChain returns the certificates in PEM data, nil when there is none
// or one does not parse.
func parseChain(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return out
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil
		}
		out = append(out, c)
	}
}

func parsesAsKey(data []byte) bool {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return false
		}
		if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
			return true
		}
		if _, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
			return true
		}
		if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
			return true
		}
	}
}
