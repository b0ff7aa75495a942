// Records of an open network (one without a grid CA): no certificate
// vouches for them, so each site signs its records with an Ed25519 key of
// its own, carried in the record, and every other site holds a site's
// records to the first key that signed them (trust on first use), until
// its operator resets that site's key. A key holder can still announce a
// site nobody announced before, or one that never signs (an upstream Grid
// site); it can no longer rewrite a site that signed first.

package record

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gridsync/gridsync/gossip/sites"
)

// Reasons a record of an open network is refused (besides unsigned: no
// signature from a site held to a key).
const (
	// RejectReboundKey: signed with another key than the one its site is
	// held to.
	RejectReboundKey = "rebound_key"
	// RejectBeforeReset: signed before its site's key was reset here,
	// with the key reset (a copy another site still passes on).
	RejectBeforeReset = "before_reset"
)

// openSigningContext starts every signed message of an open network: a
// signature of one is never taken for a record of a network with a grid
// CA, nor for anything else.
const openSigningContext = "gridsync open network record v1\x00"

// openSignedBytes is what an open network's record signature covers: the
// context, the public key, then the canonical encoding of every field
// (signedBytes, which a network with a grid CA signs alone).
func openSignedBytes(r *Record, pub []byte) ([]byte, error) {
	b, err := signedBytes(r)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(openSigningContext)+binary.MaxVarintLen64+len(pub)+len(b))
	out = append(out, openSigningContext...)
	out = binary.AppendUvarint(out, uint64(len(pub)))
	out = append(out, pub...)
	return append(out, b...), nil
}

// KeyFingerprint is what a site's key is known by: the SHA-256 of the
// public key, lowercase hex.
func KeyFingerprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])
}

// OpenSigner is this site's key for the records of open networks.
type OpenSigner struct {
	key ed25519.PrivateKey
	pub ed25519.PublicKey
	// Fingerprint is the key's (KeyFingerprint).
	Fingerprint string
}

// NewOpenSigner takes an Ed25519 private key.
func NewOpenSigner(key ed25519.PrivateKey) (*OpenSigner, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("not an Ed25519 private key")
	}
	pub := key.Public().(ed25519.PublicKey)
	return &OpenSigner{key: key, pub: pub, Fingerprint: KeyFingerprint(pub)}, nil
}

// Sign fills a record's signature material: its public key as the one
// element of Chain, and the signature.
func (s *OpenSigner) Sign(r *Record) error {
	r.Chain, r.Sig = [][]byte{s.pub}, nil
	msg, err := openSignedBytes(r, s.pub)
	if err != nil {
		return err
	}
	r.Sig = ed25519.Sign(s.key, msg)
	return nil
}

// SignOpen signs the record with an open network's site key, as the
// record's site does: for tools and tests that speak the state layer
// themselves.
func (r *Record) SignOpen(key ed25519.PrivateKey) error {
	s, err := NewOpenSigner(key)
	if err != nil {
		return err
	}
	return s.Sign(r)
}

// openKey is the key an open network's record is signed with: signed is
// false for a record without any signature material, ok false for
// material of another shape (a certificate chain, a key of another size).
func openKey(r *Record) (pub ed25519.PublicKey, signed, ok bool) {
	if len(r.Sig) == 0 && len(r.Chain) == 0 {
		return nil, false, true
	}
	if len(r.Chain) != 1 || len(r.Chain[0]) != ed25519.PublicKeySize || len(r.Sig) != ed25519.SignatureSize {
		return nil, true, false
	}
	return ed25519.PublicKey(r.Chain[0]), true, true
}

// Signed reports whether a record carries signature material.
func Signed(r *Record) bool { return len(r.Sig) > 0 || len(r.Chain) > 0 }

// checkOpen is Check in an open network: a signed record's signature
// must verify with the key it carries, and that key must be the one its
// site is held to (when it is held to one); an unsigned record is kept
// only from a site held to no key.
func checkOpen(t *NetworkTrust, r *Record) string {
	pub, signed, ok := openKey(r)
	if !ok {
		return RejectBadSignature
	}
	fp := ""
	if signed {
		fp = KeyFingerprint(pub)
	}
	if why := t.Keys.judge(r, fp); why != "" {
		return why
	}
	if !signed {
		return ""
	}
	msg, err := openSignedBytes(r, pub)
	if err != nil || !ed25519.Verify(pub, msg, r.Sig) {
		return RejectBadSignature
	}
	return ""
}

// SiteKeys are the keys the sites of one open network are held to: each
// site to the first key whose record was kept here.
type SiteKeys struct {
	mu    sync.Mutex
	bound map[string]sites.SiteKey
	// reset are the keys an operator reset here, by site, and when: until
	// the site is bound again, a record signed with the key reset before
	// then binds nothing (other sites still hold and pass on such copies).
	reset map[string]resetKey
}

type resetKey struct {
	fingerprint string
	at          uint64 // Unix nanoseconds, as a version
}

// MaxSiteKeys bounds the keys held per network: the sites a network's
// records may come from.
const MaxSiteKeys = MaxSitesPerNetwork

func NewSiteKeys() *SiteKeys {
	return &SiteKeys{bound: map[string]sites.SiteKey{}, reset: map[string]resetKey{}}
}

// judge decides by the keys alone: a signed record (fp its key's
// fingerprint) must carry its site's key; an unsigned one (fp empty)
// comes from a site held to none. Nil holds no key (k.mu held or not
// needed: the caller's).
func (k *SiteKeys) judge(r *Record, fp string) string {
	if k == nil {
		return ""
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.judgeLocked(r, fp)
}

func (k *SiteKeys) judgeLocked(r *Record, fp string) string {
	held, ok := k.bound[r.Site]
	switch {
	case ok && fp == "":
		return RejectUnsigned
	case ok && fp != held.Fingerprint:
		return RejectReboundKey
	case !ok && fp != "" && fp == k.reset[r.Site].fingerprint && r.Version < k.reset[r.Site].at:
		return RejectBeforeReset
	}
	return ""
}

// Admit decides again, under the lock that binds, and keeps a record that
// passes with keep. A signed record first drops the unsigned records
// held of its site (dropUnsigned: they are not its key's); the first one
// of its site that keep stores binds the site to its key (bound). full:
// the network holds MaxSiteKeys keys already and the record's site is
// not one of them.
func (k *SiteKeys) Admit(r *Record, now time.Time, dropUnsigned func(), keep func() bool) (refused string, full, bound bool) {
	pub, signed, ok := openKey(r)
	if !ok {
		return RejectBadSignature, false, false
	}
	if k == nil {
		keep()
		return "", false, false
	}
	fp := ""
	if signed {
		fp = KeyFingerprint(pub)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if why := k.judgeLocked(r, fp); why != "" {
		return why, false, false
	}
	if !signed {
		keep()
		return "", false, false
	}
	_, held := k.bound[r.Site]
	if !held && len(k.bound) >= MaxSiteKeys {
		return "", true, false
	}
	dropUnsigned()
	if !keep() || held {
		return "", false, false
	}
	k.bound[r.Site] = sites.SiteKey{Site: r.Site, Fingerprint: fp, Since: now}
	delete(k.reset, r.Site)
	return "", false, true
}

// Bound is the fingerprint of the key a site is held to.
func (k *SiteKeys) Bound(site string) (string, bool) {
	if k == nil {
		return "", false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	b, ok := k.bound[site]
	return b.Fingerprint, ok
}

// Load holds each site given to its key, unless it is held to one
// already: the keys kept before a restart. Entries that are not a site
// name and a fingerprint are skipped, and at most MaxSiteKeys are held.
func (k *SiteKeys) Load(keys []sites.SiteKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, sk := range keys {
		if _, ok := k.bound[sk.Site]; ok || len(k.bound) >= MaxSiteKeys || !validFingerprint(sk.Fingerprint) ||
			len(validation.IsDNS1123Label(sk.Site)) > 0 {
			continue
		}
		k.bound[sk.Site] = sk
	}
}

func validFingerprint(fp string) bool {
	if len(fp) != 2*sha256.Size {
		return false
	}
	for _, c := range fp {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// List is every key held, by site.
func (k *SiteKeys) List() []sites.SiteKey {
	k.mu.Lock()
	out := make([]sites.SiteKey, 0, len(k.bound))
	for _, b := range k.bound {
		out = append(out, b)
	}
	k.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Site < out[j].Site })
	return out
}

// Reset forgets the key a site is held to, and calls drop (which forgets
// what is held of the site) under the same lock, so that no record of
// the old key is kept in between. The next key to sign a record of the
// site is bound, the old one only by a record signed after now. It
// reports whether the site was held to a key.
func (k *SiteKeys) Reset(site string, now time.Time, drop func()) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	old, ok := k.bound[site]
	delete(k.bound, site)
	if ok {
		if len(k.reset) >= MaxSiteKeys {
			k.reset = map[string]resetKey{}
		}
		k.reset[site] = resetKey{fingerprint: old.Fingerprint, at: uint64(now.UnixNano())}
	}
	drop()
	return ok
}
