// Package sitetrust is a site's identity and its trust in other sites:
// the grid CA, the X.509-SVID site certificate the agent issues from it,
// the bounded mutual-TLS probe of a remote site's gateway, and the
// GridSite phase the probe's outcome leads to. It does no Kubernetes I/O:
// the controller reads and writes the Secrets and the GridSites.
package sitetrust

import (
	"bytes"
	"cmp"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gridsync/gridsync/shared/keypolicy"
)

// TrustDomain is the SPIFFE trust domain of every site certificate; a
// site's SPIFFE ID is spiffe://grid.internal/site/<site> (upstream's form;
// the earlier spiffe://grid.internal/<site> is still accepted), and its
// DNS SAN <site>.grid.internal.
const TrustDomain = "grid.internal"

// sitePath is the SPIFFE path prefix of a site identity.
const sitePath = "/site/"

// Lifetimes and the renewal point.
const (
	// CALifetime is how long a generated grid CA is valid.
	CALifetime = 10 * 365 * 24 * time.Hour
	// DefaultSiteLifetime is how long an issued site certificate is valid
	// unless said otherwise: a day, renewed with a third (8 h) left, so
	// that a site no longer renewed drops out of the grid within hours.
	DefaultSiteLifetime = 24 * time.Hour
	// PinnedSiteLifetime is the default in a network whose sites pin each
	// other's certificates: a pin is the leaf's SHA-256, which every
	// renewal changes, so the pins would have to follow a daily renewal.
	PinnedSiteLifetime = 90 * 24 * time.Hour
	// maxBackdate covers clocks a little behind the issuer's.
	maxBackdate = time.Minute
	// MaxPEMBytes bounds any PEM the agent parses (a CA bundle, a chain).
	MaxPEMBytes = 64 << 10
)

// SPIFFEID is a site's SPIFFE ID, as issued.
func SPIFFEID(site string) string { return "spiffe://" + TrustDomain + sitePath + site }

// legacySPIFFEID is the form issued before upstream settled on /site/.
func legacySPIFFEID(site string) string { return "spiffe://" + TrustDomain + "/" + site }

// DNSName is a site's DNS SAN.
func DNSName(site string) string { return site + "." + TrustDomain }

// ValidSiteName reports why site cannot name a certificate's subject: it
// must be a lowercase DNS label, which keeps the organization and the
// SPIFFE path segment in step.
func ValidSiteName(site string) error {
	if errs := validation.IsDNS1123Label(site); len(errs) > 0 {
		return fmt.Errorf("site name %q is not a lowercase DNS label: %s", site, strings.Join(errs, "; "))
	}
	return nil
}

// Fingerprint is the canonical pin of a certificate: lowercase SHA-256 hex
// of its DER, no separators.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// PEMFingerprint is upstream's earlier pin (spec.trust.certFingerprint):
// the SHA-256 of the certificate's PEM encoding, as colon-separated
// lowercase hex bytes.
func PEMFingerprint(der []byte) string {
	sum := sha256.Sum256(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	out := make([]byte, 0, 3*len(sum))
	for i, b := range sum {
		if i > 0 {
			out = append(out, ':')
		}
		out = hex.AppendEncode(out, []byte{b})
	}
	return string(out)
}

// Pinned says whether a certificate matches one of pins, in either form.
func Pinned(pins []string, der []byte) bool {
	return slices.Contains(pins, Fingerprint(der)) || slices.Contains(pins, PEMFingerprint(der))
}

// CA is a grid CA that can issue site certificates.
type CA struct {
	Cert *x509.Certificate
	key  crypto.Signer
	// IssueFloor, when set, is the earliest start of a certificate of a
	// site (zero: none): after a lifted eviction, what is issued must be
	// told apart from what the site held before it.
	IssueFloor func(site string) time.Time
	// SiteLifetime is the lifetime of a site certificate issued with none
	// asked for (0); DefaultSiteLifetime when it is 0 too.
	SiteLifetime time.Duration
	// Also are the network's other grid CAs during a rotation: a renewal
	// may present a certificate of one of them.
	Also []*x509.Certificate
}

// NewCA generates a grid CA (ECDSA P-256): its certificate and key, PEM.
// It may sign leaves only (path length zero).
func NewCA(now time.Time, lifetime time.Duration) (certPEM, keyPEM []byte, err error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "gridsync grid CA"},
		NotBefore:             now.Add(-backdate(lifetime)),
		NotAfter:              now.Add(lifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, keyPEM, err := sign(tmpl, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), keyPEM, nil
}

// sign gives tmpl a new ECDSA P-256 key and a random serial and signs it
// with parent's signer, or with its own key when parent is nil (a root).
func sign(tmpl, parent *x509.Certificate, signer crypto.Signer) (der, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return nil, nil, err
	}
	if parent == nil {
		parent, signer = tmpl, key
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return der, pemBlock("PRIVATE KEY", keyDER), nil
}

// ParseCA reads a grid CA's certificate and key. Errors never quote the
// key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := ParseCertificates(certPEM)
	if err != nil {
		return nil, err
	}
	cert := certs[0]
	// Every chain verified under the CA checks a signature made with its
	// key: one of a kind and size gridsync accepts.
	if err := keypolicy.CheckCertificate(cert); err != nil {
		return nil, fmt.Errorf("the grid CA: %w", err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errors.New("the certificate is not a CA (basic constraints CA:TRUE and key usage certificate signing)")
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, errors.New("the key does not belong to the certificate")
	}
	return &CA{Cert: cert, key: key}, nil
}

// Issue signs a site certificate with the reference's X.509-SVID leaf
// profile: critical CA:FALSE, critical key usage digital signature only,
// server and client authentication, exactly one organization equal to the
// site name, one SPIFFE URI SAN whose path segment is the site name, and
// the DNS SAN <site>.grid.internal. Every field of the subject is the
// CA's choice. It returns the chain (leaf then CA) and the new key, PEM.
// The leaf never outlives the CA; a lifetime of 0 is the CA's
// SiteLifetime.
func (ca *CA) Issue(site string, now time.Time, lifetime time.Duration) (chainPEM, keyPEM []byte, err error) {
	tmpl, err := ca.siteTemplate(site, now, lifetime)
	if err != nil {
		return nil, nil, err
	}
	der, keyPEM, err := sign(tmpl, ca.Cert, ca.key)
	if err != nil {
		return nil, nil, err
	}
	chain := append(pemBlock("CERTIFICATE", der), pemBlock("CERTIFICATE", ca.Cert.Raw)...)
	return chain, keyPEM, nil
}

// IssueFor signs a site certificate for a key the CA never sees: an
// enrolling site's, from its certificate request. Only the public key is
// carried forward; the subject, the SPIFFE ID, the names and every
// extension are the CA's (the site profile of Issue). It returns the
// chain (leaf then CA), PEM.
func (ca *CA) IssueFor(site string, pub crypto.PublicKey, now time.Time, lifetime time.Duration) ([]byte, error) {
	tmpl, err := ca.siteTemplate(site, now, lifetime)
	if err != nil {
		return nil, err
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		return nil, err
	}
	return append(pemBlock("CERTIFICATE", der), pemBlock("CERTIFICATE", ca.Cert.Raw)...), nil
}

// siteTemplate is the X.509-SVID leaf profile for site.
func (ca *CA) siteTemplate(site string, now time.Time, lifetime time.Duration) (*x509.Certificate, error) {
	if err := ValidSiteName(site); err != nil {
		return nil, err
	}
	if lifetime <= 0 {
		lifetime = cmp.Or(ca.SiteLifetime, DefaultSiteLifetime)
	}
	id, err := url.Parse(SPIFFEID(site))
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	notBefore := now.Add(-backdate(lifetime))
	if ca.IssueFloor != nil {
		if floor := ca.IssueFloor(site); notBefore.Before(floor) {
			notBefore = floor
			if floor.After(now) {
				notBefore = now
			}
		}
	}
	return &x509.Certificate{
		Subject:               pkix.Name{CommonName: site, Organization: []string{site}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		IsCA:                  false,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:              []string{DNSName(site)},
		URIs:                  []*url.URL{id},
	}, nil
}

// backdate is how far before now a certificate starts: a minute, or a
// tenth of a short lifetime (so that the renewal point stays ahead).
func backdate(lifetime time.Duration) time.Duration {
	return min(maxBackdate, lifetime/10)
}

// RenewAt is when a certificate is renewed: two thirds into its lifetime.
func RenewAt(cert *x509.Certificate) time.Time {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotBefore.Add(life * 2 / 3)
}

// Object identifiers of the extensions the SVID profile marks critical.
var (
	oidBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}
	oidKeyUsage         = asn1.ObjectIdentifier{2, 5, 29, 15}
)

// CheckSVID reports how a leaf departs from the X.509-SVID site profile
// for site; nil when it has it exactly.
func CheckSVID(leaf *x509.Certificate, site string) error {
	critical := func(oid asn1.ObjectIdentifier) bool {
		for _, e := range leaf.Extensions {
			if e.Id.Equal(oid) {
				return e.Critical
			}
		}
		return false
	}
	var problems []string
	if !leaf.BasicConstraintsValid || leaf.IsCA || !critical(oidBasicConstraints) {
		problems = append(problems, "no critical CA:FALSE basic constraint")
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature || !critical(oidKeyUsage) {
		problems = append(problems, "key usage is not a critical digital signature only")
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		problems = append(problems, "not for both server and client authentication")
	}
	if len(leaf.Subject.Organization) != 1 || leaf.Subject.Organization[0] != site {
		problems = append(problems, fmt.Sprintf("organization is not exactly %q", site))
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != SPIFFEID(site) && leaf.URIs[0].String() != legacySPIFFEID(site) {
		problems = append(problems, fmt.Sprintf("SPIFFE ID is not exactly %s", SPIFFEID(site)))
	}
	if !slices.Contains(leaf.DNSNames, DNSName(site)) {
		problems = append(problems, "no DNS SAN "+DNSName(site))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// SPIFFESite is the site a leaf's SPIFFE ID names, "" when it carries no
// single SPIFFE ID of the grid's trust domain.
func SPIFFESite(leaf *x509.Certificate) string {
	if len(leaf.URIs) != 1 {
		return ""
	}
	u := leaf.URIs[0]
	if u.Scheme != "spiffe" || u.Host != TrustDomain {
		return ""
	}
	seg, ok := strings.CutPrefix(u.Path, sitePath)
	if !ok {
		seg = strings.TrimPrefix(u.Path, "/")
	}
	if seg == "" || strings.Contains(seg, "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return ""
	}
	return seg
}

// ParseCertificates reads every CERTIFICATE block of a PEM bundle: at
// least one, nothing but certificates, at most MaxPEMBytes. A private key
// in it is refused without quoting it.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	if len(data) > MaxPEMBytes {
		return nil, fmt.Errorf("the PEM is %d bytes, over the limit of %d", len(data), MaxPEMBytes)
	}
	var out []*x509.Certificate
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			if strings.Contains(b.Type, "PRIVATE KEY") {
				return nil, errors.New("the PEM holds a private key where certificates belong")
			}
			return nil, fmt.Errorf("the PEM holds a %q block where certificates belong", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("a certificate does not parse: %w", err)
		}
		out = append(out, c)
	}
	if len(bytes.TrimSpace(rest)) > 0 && len(out) == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	if len(out) == 0 {
		return nil, errors.New("no certificate in it")
	}
	return out, nil
}

// parseKey reads a PKCS#8, EC or PKCS#1 private key.
func parseKey(data []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("the key is not PEM")
	}
	if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
		return nil, errors.New("the key cannot sign")
	}
	if k, err := x509.ParseECPrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	return nil, errors.New("the key does not parse (PKCS#8, EC or PKCS#1 expected)")
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	ea, ok := a.(equaler)
	return ok && ea.Equal(b)
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

// EncodeCertificate is a certificate as PEM.
func EncodeCertificate(c *x509.Certificate) []byte { return pemBlock("CERTIFICATE", c.Raw) }

// Signer is the CA's key, for what else the grid CA signs (a network's
// trust bundle). It never leaves the process.
func (ca *CA) Signer() crypto.Signer { return ca.key }
