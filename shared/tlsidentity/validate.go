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

	"github.com/gridsync/gridsync/shared/keypolicy"
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
	// ReasonBadChain: the certificates do not form a chain (each signed
	// by the next), or more of them than a handshake carries.
	ReasonBadChain Reason = "bad_chain"
	// ReasonWeakKey: a key of a kind or size keypolicy does not accept
	// (an RSA key shorter than 2,048 bits or longer than 4,096, a curve
	// other than P-256 and P-384...).
	ReasonWeakKey Reason = "weak_key"
)

// Bounds of a certificate chain. A TLS handshake carries the chain in one
// message, and clients cap it (Go's at 256 KiB); real chains are a leaf
// and one or two intermediates, a few KiB.
const (
	MaxChainCertificates = 8
	MaxChainBytes        = 64 << 10
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
		if ParseChain(m.cert) != nil && ParsesAsKey(m.key) {
			return nil, rejection(MaterialCertificate, ReasonMismatch, "the private key does not match the certificate")
		}
		return nil, rejection(MaterialCertificate, ReasonUnparseable, err.Error())
	}
	chain, rej := checkChain(pair.Certificate)
	if rej != nil {
		return nil, rej
	}
	leaf := chain[0]
	pair.Leaf = leaf
	// Only certificates are published from the certificate file: whatever
	// else it held (text, a stray key) stays behind.
	id := &Identity{Certificate: pair, CertPEM: encodeChain(chain), KeyPEM: m.key, Generation: m.generation}
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
		roots, rej := usableRoots(ParseChain(m.ca), now)
		if rej != nil {
			return nil, rej
		}
		pool := x509.NewCertPool()
		for _, c := range roots {
			if !now.Before(c.NotBefore) && (id.CANotAfter.IsZero() || c.NotAfter.Before(id.CANotAfter)) {
				id.CANotAfter = c.NotAfter
			}
			pool.AddCert(c)
		}
		id.CAPEM = encodeChain(roots)
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

// checkChain parses the certificate file's chain and checks that a client
// can use it: bounded, every certificate signed by the next, and every key
// of a kind and size keypolicy accepts, checked before any signature. The
// last certificate may be signed by a root of the bundle.
func checkChain(ders [][]byte) ([]*x509.Certificate, *Rejection) {
	if len(ders) > MaxChainCertificates {
		return nil, rejection(MaterialCertificate, ReasonBadChain, fmt.Sprintf("%d certificates, at most %d", len(ders), MaxChainCertificates))
	}
	size := 0
	chain := make([]*x509.Certificate, 0, len(ders))
	for _, der := range ders {
		size += len(der)
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, rejection(MaterialCertificate, ReasonUnparseable, err.Error())
		}
		chain = append(chain, c)
	}
	if size > MaxChainBytes {
		return nil, rejection(MaterialCertificate, ReasonBadChain, fmt.Sprintf("the chain takes %d bytes, at most %d", size, MaxChainBytes))
	}
	for _, c := range chain {
		if err := keypolicy.CheckPublicKey(c.PublicKey); err != nil {
			return nil, rejection(MaterialCertificate, ReasonWeakKey, fmt.Sprintf("%q: %v", c.Subject.String(), err))
		}
	}
	for i, c := range chain {
		if i+1 < len(chain) {
			if err := c.CheckSignatureFrom(chain[i+1]); err != nil {
				return nil, rejection(MaterialCertificate, ReasonBadChain, fmt.Sprintf("certificate %d (%q) is not signed by certificate %d (%q)", i, c.Subject.String(), i+1, chain[i+1].Subject.String()))
			}
		}
	}
	return chain, nil
}

// usableRoots keeps the roots of a bundle that are or will become valid.
// A bundle mid-rotation holds the old root next to the new one; an expired
// old root is left out rather than failing the whole identity, as long as
// one root is valid now (the chain must still verify to it).
func usableRoots(roots []*x509.Certificate, now time.Time) ([]*x509.Certificate, *Rejection) {
	if len(roots) == 0 {
		return nil, rejection(MaterialCABundle, ReasonUnparseable, "no certificate in the CA bundle")
	}
	var kept []*x509.Certificate
	var firstProblem *Rejection
	validNow := false
	for _, c := range roots {
		rej := checkValidity(MaterialCABundle, c, now)
		switch {
		case rej == nil:
			validNow = true
			kept = append(kept, c)
		case rej.Reason == ReasonNotYetValid:
			kept = append(kept, c) // staged ahead of a rotation
		}
		if rej != nil && firstProblem == nil {
			firstProblem = rej
		}
	}
	if !validNow {
		return nil, firstProblem
	}
	return kept, nil
}

// encodeChain is the PEM of certificates, nothing else.
func encodeChain(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
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

// ParseChain returns the certificates in PEM data, nil when there is none
// or one does not parse.
func ParseChain(data []byte) []*x509.Certificate {
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

// ParsesAsKey says whether PEM data holds a private key that parses
// (PKCS #8, SEC 1 or PKCS #1).
func ParsesAsKey(data []byte) bool {
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
