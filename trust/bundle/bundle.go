// Package bundle is a network's trust bundle: the issuer's signed word on
// which sites the network has evicted. The issuer signs it with the grid
// CA's key; every site checks it against the grid CA it already trusts, so
// the bundle can travel by any path (gossip, a poll, a renewal, a status
// field) and be passed on by any site without being trusted further than
// its signature.
package bundle

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/gridsync/gridsync/shared/keypolicy"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Bounds of a signed bundle, checked before it is parsed: a network lists
// at most MaxEvictions sites, evicted or lifted (spec.tls.siteCertificate.
// evictedSites holds 512; past it, the lifts longest ago are dropped), trusts at most MaxRoots grid CAs at once (two
// during a rotation), and a bundle carries a signature of each CA the
// issuer holds. MaxSignedSize holds the largest such bundle (a test signs
// one).
const (
	MaxEvictions  = 512
	MaxRoots      = 4
	MaxSignedSize = 128 << 10
	maxSigBytes   = 1 << 10
	maxRootBytes  = 8 << 10
	// maxBodyBytes is the largest body whose base64 and signatures fit
	// MaxSignedSize.
	maxBodyBytes = MaxSignedSize*3/4 - 4<<10
)

// signingContext starts the signed bytes, so that a bundle's signature can
// never be taken for a signature of anything else the grid CA signs (a
// certificate's TBS is DER, which never starts with these bytes).
const signingContext = "gridsync trust bundle v1\x00"

// Bundle is a network's trust bundle.
type Bundle struct {
	Network string `json:"network"`
	// Issuer is the site that signed it.
	Issuer string `json:"issuer"`
	// Version orders the bundles of a network: the time it was signed
	// (Unix nanoseconds), above the previous one's. The newest wins.
	Version uint64 `json:"version"`
	// Evictions are the sites evicted, and those whose eviction was
	// lifted, by site name.
	Evictions []Eviction `json:"evictions,omitempty"`
	// Roots are the grid CA certificates (DER) the network trusts, once
	// its issuer has rotated its CA (empty: the CA each site is
	// configured with). A bundle that changes them is signed by a CA the
	// sites already trust, so trust passes from the old CA to the new.
	Roots [][]byte `json:"roots,omitempty"`
	// Issuing is the SHA-256 (hex) of the CA certificate the issuer
	// issues from: a site whose certificate another CA issued renews now.
	Issuing string `json:"issuing,omitempty"`
}

// Eviction is one site's eviction.
type Eviction struct {
	Site string `json:"site"`
	// Since is when the issuer evicted it.
	Since time.Time `json:"since"`
	// Lifted is when the operator lifted it (nil while it holds). A
	// certificate of the site that starts before Since stays refused
	// after the lift: only one issued since (a new enrolment) readmits
	// the site. The issuer issues nothing to an evicted site, and starts
	// what it issues after a lift later than Since.
	Lifted *time.Time `json:"lifted,omitempty"`
}

// Signed is a bundle as it travels: its canonical encoding and the
// signatures over it of every grid CA the issuer holds (one, or two
// during a rotation); one that verifies with a CA the receiver trusts is
// enough.
type Signed struct {
	Body []byte   `json:"b"`
	Sigs [][]byte `json:"s"`
}

// Evicted reports whether the bundle evicts site now (an eviction that
// holds, not a lifted one).
func (b *Bundle) Evicted(site string) bool {
	if b == nil {
		return false
	}
	for _, e := range b.Evictions {
		if e.Site == site && e.Lifted == nil {
			return true
		}
	}
	return false
}

// EvictedSites are the sites evicted now, sorted.
func (b *Bundle) EvictedSites() []string {
	if b == nil {
		return nil
	}
	var out []string
	for _, e := range b.Evictions {
		if e.Lifted == nil {
			out = append(out, e.Site)
		}
	}
	sort.Strings(out)
	return out
}

// Refuses reports whether a certificate of site that starts at notBefore
// is refused: its site is evicted, or was and the certificate dates from
// before the eviction.
func (b *Bundle) Refuses(site string, notBefore time.Time) bool {
	if b == nil {
		return false
	}
	for _, e := range b.Evictions {
		if e.Site != site {
			continue
		}
		if e.Lifted == nil || !notBefore.After(e.Since) {
			return true
		}
	}
	return false
}

// IssueFloor is the earliest start the issuer may give a certificate of
// site: after the site's last eviction, so that a certificate issued after
// a lift is told apart from those of before (zero: no floor).
func (b *Bundle) IssueFloor(site string) time.Time {
	var floor time.Time
	if b == nil {
		return floor
	}
	for _, e := range b.Evictions {
		if e.Site == site && e.Since.After(floor) {
			floor = e.Since
		}
	}
	if floor.IsZero() {
		return floor
	}
	return floor.Add(time.Second)
}

// Next is the bundle that evicts exactly the sites listed, from prev (nil
// for a network's first): a site newly listed is evicted from now, one no
// longer listed is lifted now, the rest keep their times. It returns nil
// when nothing changes. The version is now, or one above prev's.
func Next(prev *Bundle, network, issuer string, evicted []string, now time.Time) (*Bundle, error) {
	return NextWith(prev, network, issuer, evicted, nil, "", now)
}

// NextWith is Next for an issuer that also names the grid CAs the network
// trusts and the one it issues from (nil and "": none named).
func NextWith(prev *Bundle, network, issuer string, evicted []string, roots [][]byte, issuing string, now time.Time) (*Bundle, error) {
	want := map[string]bool{}
	for _, s := range evicted {
		if err := sitetrust.ValidSiteName(s); err != nil {
			return nil, fmt.Errorf("evicted site %q: %w", s, err)
		}
		want[s] = true
	}
	now = now.UTC().Truncate(time.Second)
	next := &Bundle{Network: network, Issuer: issuer, Roots: roots, Issuing: issuing}
	changed := prev == nil && (len(want) > 0 || len(roots) > 0)
	if prev != nil && (prev.Issuing != issuing || !slices.EqualFunc(prev.Roots, roots, bytes.Equal)) {
		changed = true
	}
	held := map[string]bool{}
	if prev != nil {
		for _, e := range prev.Evictions {
			switch {
			case e.Lifted == nil && !want[e.Site]:
				lifted := now
				e.Lifted = &lifted
				changed = true
			case e.Lifted == nil:
				held[e.Site] = true
			case want[e.Site] && !held[e.Site]:
				// Evicted again after a lift: a new eviction below.
				continue
			}
			next.Evictions = append(next.Evictions, e)
		}
	}
	for _, s := range sortedKeys(want) {
		if !held[s] {
			next.Evictions = append(next.Evictions, Eviction{Site: s, Since: now})
			changed = true
		}
	}
	if !changed {
		return nil, nil
	}
	next.Evictions = dropOldestLifts(next.Evictions, len(next.Evictions)-MaxEvictions)
	if len(next.Evictions) > MaxEvictions {
		return nil, fmt.Errorf("%d evictions: a bundle holds at most %d", len(next.Evictions), MaxEvictions)
	}
	sort.SliceStable(next.Evictions, func(i, j int) bool { return next.Evictions[i].Site < next.Evictions[j].Site })
	next.Version = uint64(now.UnixNano())
	if prev != nil && next.Version <= prev.Version {
		next.Version = prev.Version + 1
	}
	return next, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Sign encodes the bundle and signs it with each grid CA key given:
// ECDSA and RSA over the SHA-256 of the signed bytes, Ed25519 over the
// bytes.
func Sign(b *Bundle, keys ...crypto.Signer) ([]byte, error) {
	if len(keys) == 0 {
		return nil, errors.New("no key to sign the trust bundle with")
	}
	body, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	if len(body) > maxBodyBytes {
		// Signed (base64, and its signatures) it would pass what every
		// site takes.
		return nil, fmt.Errorf("a trust bundle of %d bytes: at most %d", len(body), maxBodyBytes)
	}
	msg := append([]byte(signingContext), body...)
	s := Signed{Body: body}
	for _, key := range keys {
		var sig []byte
		if _, ok := key.Public().(ed25519.PublicKey); ok {
			sig, err = key.Sign(rand.Reader, msg, crypto.Hash(0))
		} else {
			digest := sha256.Sum256(msg)
			sig, err = key.Sign(rand.Reader, digest[:], crypto.SHA256)
		}
		if err != nil {
			return nil, err
		}
		s.Sigs = append(s.Sigs, sig)
	}
	return json.Marshal(s)
}

// Errors of Open.
var (
	ErrTooLarge     = fmt.Errorf("a signed trust bundle is larger than %d bytes", MaxSignedSize)
	ErrMalformed    = errors.New("the trust bundle does not parse")
	ErrBadSignature = errors.New("the trust bundle's signature does not verify against the grid CA")
	ErrWrongNetwork = errors.New("the trust bundle is another network's")
)

// Open checks a signed bundle of network against the grid CA certificates
// and returns it. What costs nothing comes first: the size, then the
// signature (over the bytes as received), then the parse.
func Open(signed []byte, network string, roots []*x509.Certificate) (*Bundle, error) {
	if len(signed) > MaxSignedSize {
		return nil, ErrTooLarge
	}
	var s Signed
	if err := json.Unmarshal(signed, &s); err != nil || len(s.Body) == 0 || len(s.Sigs) == 0 || len(s.Sigs) > MaxRoots {
		return nil, ErrMalformed
	}
	msg := append([]byte(signingContext), s.Body...)
	verified := false
	for _, sig := range s.Sigs {
		if len(sig) > maxSigBytes {
			return nil, ErrMalformed
		}
		verified = verified || slices.ContainsFunc(roots, func(c *x509.Certificate) bool { return verify(c.PublicKey, msg, sig) })
	}
	if !verified {
		return nil, ErrBadSignature
	}
	var b Bundle
	dec := json.NewDecoder(bytes.NewReader(s.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil || len(b.Evictions) > MaxEvictions || len(b.Roots) > MaxRoots {
		return nil, ErrMalformed
	}
	if _, err := b.RootCerts(); err != nil {
		return nil, ErrMalformed
	}
	if b.Network != network {
		return nil, ErrWrongNetwork
	}
	for _, e := range b.Evictions {
		if sitetrust.ValidSiteName(e.Site) != nil {
			return nil, ErrMalformed
		}
	}
	return &b, nil
}

// verify checks sig over msg with a CA's public key.
func verify(pub any, msg, sig []byte) bool {
	digest := sha256.Sum256(msg)
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		return ecdsa.VerifyASN1(k, digest[:], sig)
	case *rsa.PublicKey:
		return rsa.VerifyPKCS1v15(k, crypto.SHA256, digest[:], sig) == nil
	case ed25519.PublicKey:
		return ed25519.Verify(k, msg, sig)
	}
	return false
}

// RootCerts are the grid CA certificates the bundle names, parsed: each a
// CA that signs certificates, with a key keypolicy accepts.
func (b *Bundle) RootCerts() ([]*x509.Certificate, error) {
	if b == nil {
		return nil, nil
	}
	out := make([]*x509.Certificate, 0, len(b.Roots))
	for _, der := range b.Roots {
		if len(der) > maxRootBytes {
			return nil, errors.New("a root of the bundle is too large")
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		if !c.IsCA || c.KeyUsage&x509.KeyUsageCertSign == 0 || keypolicy.CheckCertificate(c) != nil {
			return nil, errors.New("a root of the bundle is not a grid CA")
		}
		out = append(out, c)
	}
	return out, nil
}

// VersionOf is the version a signed bundle says it has, unchecked (0 when
// it does not parse): what a site claims to hold, for counting only.
func VersionOf(signed []byte) uint64 {
	if b := peek(signed); b != nil {
		return b.Version
	}
	return 0
}

// Peek is a signed bundle that was checked when it was kept (a step of a
// book's chain), parsed again without its signatures (nil when it does
// not parse).
func Peek(signed []byte) *Bundle { return peek(signed) }

func peek(signed []byte) *Bundle {
	if len(signed) == 0 || len(signed) > MaxSignedSize {
		return nil
	}
	var s Signed
	var b Bundle
	if json.Unmarshal(signed, &s) != nil || json.Unmarshal(s.Body, &b) != nil {
		return nil
	}
	return &b
}

// dropOldestLifts drops up to n lifted entries, those lifted longest ago
// first, so that a network of many evictions since lifted can still sign
// a new one: a lifted entry only refuses certificates issued before its
// eviction, and the oldest of those have long expired or been replaced.
// A site still evicted is never dropped.
func dropOldestLifts(evictions []Eviction, n int) []Eviction {
	if n <= 0 {
		return evictions
	}
	var lifts []int
	for i, e := range evictions {
		if e.Lifted != nil {
			lifts = append(lifts, i)
		}
	}
	sort.SliceStable(lifts, func(a, b int) bool { return evictions[lifts[a]].Lifted.Before(*evictions[lifts[b]].Lifted) })
	drop := map[int]bool{}
	for _, i := range lifts[:min(n, len(lifts))] {
		drop[i] = true
	}
	kept := evictions[:0:0]
	for i, e := range evictions {
		if !drop[i] {
			kept = append(kept, e)
		}
	}
	return kept
}
