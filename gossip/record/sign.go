// Signed records: each site signs what it gossips with its certificate
// key, and a record is kept only when its signature verifies against a
// certificate of the grid CA that names the record's site. Holding the
// SWIM key lets a peer speak in membership, not for another site.

package record

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gridsync/gridsync/shared/keypolicy"
	"github.com/gridsync/gridsync/trust/bundle"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Reasons a record is refused before it is stored (the reason label of
// grid_swim_records_rejected_total).
const (
	RejectUnknownNetwork = "unknown_network"       // a network this site does not take part in
	RejectNoRoots        = "no_trust_roots"        // the network's grid CA did not load here
	RejectUnsigned       = "unsigned"              // no signature in a network with a grid CA, or from a site held to a key in one without
	RejectBadCertificate = "bad_certificate"       // the signer's chain does not parse
	RejectKeyRefused     = "key_refused"           // a key of its chain is of a kind or size keypolicy refuses
	RejectUntrusted      = "untrusted_certificate" // it does not chain to the grid CA, or is not valid now
	RejectWrongSite      = "wrong_site"            // its organization or SPIFFE ID names another site
	RejectBadSignature   = "bad_signature"         // the signature does not verify
	RejectFromFuture     = "from_future"           // signed (versioned) ahead of this site's clock
	RejectTooOld         = "too_old"               // signed longer ago than the tombstone lifetime
	RejectOtherGrid      = "other_grid"            // signed for another grid ID
	// A record held while its certificate was valid, dropped once it is
	// not (it expired, or the grid CA changed).
	RejectNoLongerValid = "certificate_no_longer_valid"
	// The network's trust bundle evicts its site, or its certificate
	// dates from before an eviction since lifted.
	RejectEvicted = "evicted"
)

var RecordRejectReasons = []string{RejectUnknownNetwork, RejectNoRoots, RejectUnsigned, RejectBadCertificate, RejectKeyRefused,
	RejectUntrusted, RejectWrongSite, RejectBadSignature, RejectFromFuture, RejectTooOld, RejectOtherGrid, RejectNoLongerValid, RejectEvicted, RejectReboundKey, RejectBeforeReset}

// MaxClockSkew is how far another site's clock may be ahead of this one's
// (a record versioned further ahead is refused: a version is the time it
// was signed, so a forged far-future version could never be superseded).
// The SWIM stream gate holds sites to the same bound.
const MaxClockSkew = 2 * time.Minute

// Bounds of a record's signature material.
const (
	maxChainCerts = keypolicy.MaxChain
	maxCertBytes  = 8 << 10
	maxSigBytes   = 1 << 10
)

// signingContext starts every signed message, so that a record's
// signature can never be taken for a signature of anything else the site
// certificate signs (a TLS handshake signs other bytes).
const signingContext = "gridsync membership record v1\x00"

// recordBody is the part of a record its kind carries, as signed.
type recordBody struct {
	GatewayAddress string `json:"ga,omitempty"`
	CertPEM        string `json:"pem,omitempty"`
	Region         string `json:"rg,omitempty"`
	Zone           string `json:"zn,omitempty"`
	TrustBundle    []byte `json:"tb,omitempty"`
	Providers      any    `json:"p,omitempty"`
	Signals        any    `json:"sg,omitempty"`
}

// signedBytes is the canonical encoding a record's signature covers:
// every field but the signature material, each length-prefixed.
func signedBytes(r *Record) ([]byte, error) {
	body := recordBody{GatewayAddress: r.GatewayAddress, CertPEM: r.CertPEM, Region: r.Region, Zone: r.Zone, TrustBundle: r.TrustBundle}
	if len(r.Providers) > 0 {
		body.Providers = r.Providers
	}
	if len(r.Signals) > 0 {
		body.Signals = r.Signals
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(signingContext)+len(b)+len(r.Network)+len(r.Site)+len(r.Grid)+64)
	out = append(out, signingContext...)
	for _, f := range []string{r.Network, r.Site, string(r.Kind), r.Grid} {
		out = binary.AppendUvarint(out, uint64(len(f)))
		out = append(out, f...)
	}
	out = binary.BigEndian.AppendUint64(out, r.Version)
	if r.Deleted {
		out = append(out, 1)
	} else {
		out = append(out, 0)
	}
	out = binary.AppendUvarint(out, uint64(len(b)))
	return append(out, b...), nil
}

// Signer is this site's certificate and key in one network.
type Signer struct {
	key   crypto.Signer
	Chain [][]byte // leaf first, then intermediates; no self-signed root
	leaf  *x509.Certificate
}

// NewSigner takes a site certificate and key as the TLS layer loaded it.
// The self-signed CA a site Secret's tls.crt often ends with is left out
// of the chain: every receiver holds it already.
func NewSigner(c *tls.Certificate) (*Signer, error) {
	if c == nil || len(c.Certificate) == 0 {
		return nil, errors.New("no certificate")
	}
	key, ok := c.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("the key cannot sign")
	}
	leaf := c.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
	}
	s := &Signer{key: key, leaf: leaf, Chain: [][]byte{c.Certificate[0]}}
	for _, der := range c.Certificate[1:] {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		if cert.CheckSignatureFrom(cert) == nil {
			continue // a root
		}
		s.Chain = append(s.Chain, der)
	}
	return s, nil
}

// Sign fills a record's signature material.
func (s *Signer) Sign(r *Record) error {
	msg, err := signedBytes(r)
	if err != nil {
		return err
	}
	var sig []byte
	switch s.key.Public().(type) {
	case ed25519.PublicKey:
		sig, err = s.key.Sign(rand.Reader, msg, crypto.Hash(0))
	case *ecdsa.PublicKey, *rsa.PublicKey:
		sum := sha256.Sum256(msg)
		sig, err = s.key.Sign(rand.Reader, sum[:], crypto.SHA256)
	default:
		return fmt.Errorf("a %T key cannot sign records", s.key.Public())
	}
	if err != nil {
		return err
	}
	r.Chain, r.Sig = s.Chain, sig
	return nil
}

// signatureAlgorithm is how a certificate's key signs records.
func signatureAlgorithm(pub any) x509.SignatureAlgorithm {
	switch pub.(type) {
	case *ecdsa.PublicKey:
		return x509.ECDSAWithSHA256
	case *rsa.PublicKey:
		return x509.SHA256WithRSA
	case ed25519.PublicKey:
		return x509.PureEd25519
	}
	return x509.UnknownSignatureAlgorithm
}

// NetworkTrust is what one network's records are signed with and checked
// against.
type NetworkTrust struct {
	// Open: the network has no grid CA. Its records are signed with each
	// site's own key (OpenSigner) or not at all, and Keys holds each site
	// to the first key that signed its records.
	Open bool
	// OpenSigner is this site's key in an open network (nil: its records
	// there go unsigned).
	OpenSigner *OpenSigner
	// Keys are the keys an open network's sites are held to (nil: none).
	Keys *SiteKeys
	// Roots are the grid CA's certificates (nil: they did not load).
	Roots  *x509.CertPool
	Signer *Signer // nil: this site has no certificate in the network yet
	// Chains remembers the signing chains checked against Roots.
	Chains *ChainCache
	// RootIDs are the grid CA certificates' key identifiers (and their
	// subjects, for a CA without one): a chain whose top does not name
	// one of them as its issuer is refused before any signature is
	// checked. Empty when the caller gave the pool alone: the chain's own
	// links are still checked.
	RootIDs []RootID
	// Network and Evictions are the network's name and its trust
	// bundles (nil: no eviction is applied): a record of an evicted site
	// is refused before its chain is looked at, and one signed with a
	// certificate from before a lifted eviction once its leaf is known.
	Network   string
	Evictions *bundle.Book
}

// RootID is what a certificate issued by a root names of it.
type RootID struct {
	KeyID   []byte // its subject key identifier
	Subject []byte // its subject, DER
}

func RootIDsOf(certs []*x509.Certificate) []RootID {
	out := make([]RootID, 0, len(certs))
	for _, c := range certs {
		out = append(out, RootID{KeyID: c.SubjectKeyId, Subject: c.RawSubject})
	}
	return out
}

// ChainCache remembers which signing chains verified against a network's
// roots, and until when, so that a record costs one signature check and
// not a chain verification: a site signs every record with the same
// certificate. Refused chains are remembered apart, so that a flood of
// invented chains never pushes a good one out, and the same junk sent
// again costs a map lookup.
type ChainCache struct {
	mu      sync.Mutex
	good    map[[sha256.Size]byte]chainResult
	refused map[[sha256.Size]byte]string
}

type chainResult struct {
	leaf      *x509.Certificate
	reason    string // refused: why
	notBefore time.Time
	notAfter  time.Time
}

// Bounds of the cache: beyond one, that half starts again (a grid has
// one chain per site, two during a renewal; refused chains are the
// inventions of a key holder, and forgetting them costs only their check
// again).
const (
	maxCachedChains  = 2048
	maxRefusedChains = 4096
)

func NewChainCache() *ChainCache {
	return &ChainCache{good: map[[sha256.Size]byte]chainResult{}, refused: map[[sha256.Size]byte]string{}}
}

// chainHash identifies a chain: every certificate, each length-prefixed.
func chainHash(chain [][]byte) [sha256.Size]byte {
	h := sha256.New()
	for _, der := range chain {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(der)))
		h.Write(n[:])
		h.Write(der)
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return key
}

// Verify checks a signing chain against the roots at now, and returns its
// leaf or why it is refused.
func (c *ChainCache) Verify(t *NetworkTrust, chain [][]byte, now time.Time) (*x509.Certificate, string) {
	key := chainHash(chain)
	c.mu.Lock()
	res, ok := c.good[key]
	why, refused := c.refused[key]
	c.mu.Unlock()
	if refused {
		return nil, why
	}
	if !ok {
		res = verifyChain(t, chain, now)
		c.mu.Lock()
		if res.reason != "" {
			if len(c.refused) >= maxRefusedChains {
				c.refused = map[[sha256.Size]byte]string{}
			}
			c.refused[key] = res.reason
		} else {
			if len(c.good) >= maxCachedChains {
				c.good = map[[sha256.Size]byte]chainResult{}
			}
			c.good[key] = res
		}
		c.mu.Unlock()
	}
	if res.reason != "" {
		return nil, res.reason
	}
	if now.Before(res.notBefore) || now.After(res.notAfter) {
		return nil, RejectUntrusted
	}
	return res.leaf, ""
}

// verifyChain is the chain check itself. What costs nothing comes first:
// every certificate parses, holds a key of a kind keypolicy accepts (an
// invented 59,200-bit RSA key costs half a second a signature), and names
// the next one up by key identifier, up to a grid CA certificate. Only
// then are the signatures checked: the chain must verify to a root for
// client authentication, valid at now. The result holds the window in
// which every certificate of the chain is valid.
func verifyChain(t *NetworkTrust, chain [][]byte, now time.Time) chainResult {
	if len(chain) == 0 || len(chain) > maxChainCerts {
		return chainResult{reason: RejectBadCertificate}
	}
	certs := make([]*x509.Certificate, 0, len(chain))
	for _, der := range chain {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return chainResult{reason: RejectBadCertificate}
		}
		certs = append(certs, c)
	}
	if keypolicy.CheckChain(certs) != nil {
		return chainResult{reason: RejectKeyRefused}
	}
	if !linked(certs, t.RootIDs) {
		return chainResult{reason: RejectUntrusted}
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	verified, err := certs[0].Verify(x509.VerifyOptions{Roots: t.Roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil || len(verified) == 0 {
		return chainResult{reason: RejectUntrusted}
	}
	res := chainResult{leaf: certs[0], notBefore: certs[0].NotBefore, notAfter: certs[0].NotAfter}
	for _, c := range verified[0] {
		if c.NotBefore.After(res.notBefore) {
			res.notBefore = c.NotBefore
		}
		if c.NotAfter.Before(res.notAfter) {
			res.notAfter = c.NotAfter
		}
	}
	return res
}

// linked reports whether each certificate of a chain (leaf first) names
// the next as its issuer, and the last a grid CA certificate (or is one):
// by key identifier where both sides carry one, else by name. With no
// root identifiers, only the chain's own links are checked.
func linked(certs []*x509.Certificate, roots []RootID) bool {
	for i := 0; i+1 < len(certs); i++ {
		if !issuedBy(certs[i], certs[i+1].SubjectKeyId, certs[i+1].RawSubject) {
			return false
		}
	}
	if len(roots) == 0 {
		return true
	}
	top := certs[len(certs)-1]
	for _, r := range roots {
		if issuedBy(top, r.KeyID, r.Subject) || bytes.Equal(top.SubjectKeyId, r.KeyID) && len(r.KeyID) > 0 {
			return true
		}
	}
	return false
}

// issuedBy reports whether c names as its issuer the certificate with
// this key identifier and subject.
func issuedBy(c *x509.Certificate, keyID, subject []byte) bool {
	if len(c.AuthorityKeyId) > 0 && len(keyID) > 0 {
		return bytes.Equal(c.AuthorityKeyId, keyID)
	}
	return bytes.Equal(c.RawIssuer, subject)
}

// Check decides whether a record of another site may be kept in a network
// with the given trust: "" when it may, else the reason it is refused.
// grid is this site's grid ID ("" before it has one); ttl is the
// tombstone lifetime, beyond which a record is too old to be told apart
// from a replay.
func Check(t *NetworkTrust, r *Record, grid string, now time.Time, ttl time.Duration) string {
	if t == nil {
		return RejectUnknownNetwork
	}
	// The version is the time the record was written (and signed): in
	// every network, one too far ahead could never be superseded by its
	// site, and one too old cannot be told apart from a replay of what
	// the site has since withdrawn.
	written := time.Unix(0, int64(min(r.Version, uint64(1<<63-1))))
	if written.After(now.Add(MaxClockSkew)) {
		return RejectFromFuture
	}
	if now.Sub(written) > ttl {
		return RejectTooOld
	}
	if grid != "" && r.Grid != "" && r.Grid != grid {
		return RejectOtherGrid
	}
	if t.Open {
		return checkOpen(t, r)
	}
	if t.Roots == nil {
		return RejectNoRoots
	}
	if len(r.Sig) == 0 || len(r.Chain) == 0 {
		return RejectUnsigned
	}
	evictions := t.Evictions.Bundle(t.Network)
	if evictions.Evicted(r.Site) {
		return RejectEvicted
	}
	leaf, why := t.Chains.Verify(t, r.Chain, now)
	if why != "" {
		return why
	}
	if len(leaf.Subject.Organization) != 1 || leaf.Subject.Organization[0] != r.Site || sitetrust.SPIFFESite(leaf) != r.Site {
		return RejectWrongSite
	}
	if evictions.Refuses(r.Site, leaf.NotBefore) {
		return RejectEvicted
	}
	msg, err := signedBytes(r)
	if err != nil {
		return RejectBadSignature
	}
	if leaf.CheckSignature(signatureAlgorithm(leaf.PublicKey), msg, r.Sig) != nil {
		return RejectBadSignature
	}
	return ""
}

// Sign signs the record with a site certificate and its key, as the
// record's site does: for tools and tests that speak the state layer
// themselves (the runtime signs its own records).
func (r *Record) Sign(c *tls.Certificate) error {
	s, err := NewSigner(c)
	if err != nil {
		return err
	}
	return s.Sign(r)
}
