package enrol

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Renewals are held to MaxRenewals a site in any RenewalWindow. An honest
// site renews once per two thirds of its certificate's lifetime (60 days
// by default); a renewal whose answer was lost is retried (see
// SiteRecord.PreviousSerial) and counts as a renewal: three leave room
// for a retry or two, a site restored from a backup, or renewing by hand,
// while a stolen newest key mints at most three certificates an hour,
// each superseding the last, until the operator lists the site in
// refuseRenewal.
const (
	MaxRenewals   = 3
	RenewalWindow = time.Hour
)

// Refusals of a renewal by the register.
var (
	ErrSuperseded  = errors.New("the certificate presented is not the newest one issued to the site (the site has renewed since); only the newest renews, or the site enrols afresh with a token")
	ErrNotRetry    = errors.New("the certificate presented was superseded by the site's newest; it renews only to retry that renewal, for the newest certificate's key")
	ErrSameKey     = errors.New("a renewal asks a certificate for a new key; the request is for the key of the certificate presented")
	ErrRenewalRate = fmt.Errorf("the site renewed %d times in the last %s already; the current certificate stays valid, try again later", MaxRenewals, RenewalWindow)
	ErrReleased    = errors.New("the site's name was released by the issuer's operator: no certificate issued before the release renews; the site enrols afresh with a token")
	errNoRegister  = errors.New("the issuer's token Secret does not exist (gridsync-agent enroll-token makes it); the certificates issued cannot be recorded")
)

// Refusals of an enrolment, and of a release, by the register.
var (
	// ErrNameRegistered: the name is registered under another key.
	ErrNameRegistered = errors.New("the site's name is registered under another key")
	// ErrNotRegistered: there is no registered name to release.
	ErrNotRegistered = errors.New("the site's name is not registered")
	// errClaimLost: the name was released while its enrolment was under
	// way, between the token spent and the certificate recorded.
	errClaimLost = errors.New("the site's name was released while its enrolment was under way; the certificate was not handed out: enrol again with a new token")
)

// nameRegisteredError refuses an enrolment of a registered name under
// another key. It says what to do and nothing of the registered
// certificate: the caller is known only by its token.
type nameRegisteredError struct{ network, site string }

func (e *nameRegisteredError) Error() string {
	return fmt.Sprintf("site %s is registered in network %s under another key: the issuer's operator must release the name (gridsync-agent release-name) before it enrols under a new key; the token was not spent", e.site, e.network)
}
func (e *nameRegisteredError) Unwrap() error { return ErrNameRegistered }

// TokenIDLength is how many hex characters of a token's stored SHA-256
// identify it in the register: enough to tell an operator's tokens
// apart, nothing to enrol with.
const TokenIDLength = 12

// TokenID identifies token without being it: the first TokenIDLength
// characters of the Secret data key it is stored under.
func TokenID(token string) string { return hashOf(token)[:TokenIDLength] }

// A record's Secret data key: the prefix, then the first bytes of a hash
// of the network and site names, hex.
const (
	registerPrefix  = "site-"
	registerKeyHash = 20
)

// SiteRecord is what the issuer keeps of a site it issued a certificate
// to, in the token Secret beside the tokens (the one Secret the issuer
// may patch, so that recording needs no further access): the register
// of enrolled names. It holds the newest certificate, by serial, the one
// it superseded, and the times of the site's recent renewals. A renewal
// from the newest certificate is for a new key; a renewal from the one
// it superseded is for the newest's key only, the retry of a renewal
// whose answer the site did not get (the site keeps the key it asked for
// until it holds its certificate); any other renewal is refused, and
// that holds across restarts of the issuer. An enrolment of a registered
// name is for the newest certificate's key only (the retry of an
// enrolment whose answer was lost): another key needs the name released
// first (Release).
//
// Records written before the register kept EnrolledAt and TokenID read
// with them zero: unknown.
type SiteRecord struct {
	Network string `json:"network"`
	Site    string `json:"site"`
	// Serial is the newest certificate's serial number (hex) and
	// KeyFingerprint the SHA-256 of its public key (SubjectPublicKeyInfo,
	// hex): the certificate and the key a renewal must come from, and
	// the only key the name enrols under again. Serial is "" between an
	// enrolment's claim of the name and its certificate's record.
	Serial         string    `json:"serial"`
	KeyFingerprint string    `json:"keyFingerprint"`
	NotAfter       time.Time `json:"notAfter"`
	// EnrolledAt is when the name was first enrolled, and TokenID which
	// token enrolled it (TokenID: never the token).
	EnrolledAt time.Time `json:"enrolledAt,omitzero"`
	TokenID    string    `json:"tokenID,omitempty"`
	// ReleasedAt is when the issuer's operator released the name: what
	// stays of the record then only keeps every certificate issued
	// before from renewing (with no record at all, a certificate would
	// renew as one issued before records were kept, and take the name
	// back); any key enrols the name afresh, with a token.
	ReleasedAt time.Time `json:"releasedAt,omitzero"`
	// PreviousSerial is the serial of the certificate the newest renewed
	// from ("" after an enrolment): it may ask again for the newest key,
	// and nothing else. A thief of that older key alone cannot: the
	// request for the newest key is signed by it.
	PreviousSerial string `json:"previousSerial,omitempty"`
	// Renewals are when the site renewed within the last RenewalWindow.
	Renewals []time.Time `json:"renewals,omitempty"`
}

// registerKey is the Secret data key of a site's record: network names
// may be 253 characters long, so the key is a hash of both names (the
// record itself names them); token keys are bare 64-hex hashes, so the
// two never meet.
func registerKey(network, site string) string {
	sum := sha256.Sum256([]byte(network + "/" + site))
	return registerPrefix + hex.EncodeToString(sum[:registerKeyHash])
}

func isRegisterKey(k string) bool { return strings.HasPrefix(k, registerPrefix) }

func serialOf(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

func keyFingerprint(c *x509.Certificate) string { return spkiFingerprint(c.RawSubjectPublicKeyInfo) }

// spkiFingerprint is the SHA-256 of a public key (SubjectPublicKeyInfo),
// hex: of a certificate's, or of the key a certificate request asks for.
func spkiFingerprint(spki []byte) string {
	sum := sha256.Sum256(spki)
	return hex.EncodeToString(sum[:])
}

// recentRenewals are the renewals within the window before now.
func recentRenewals(times []time.Time, now time.Time) []time.Time {
	var kept []time.Time
	for _, at := range times {
		if now.Sub(at) < RenewalWindow && !at.After(now) {
			kept = append(kept, at)
		}
	}
	return kept
}

// mayRenew says whether presented may renew the site r records for the
// key whose fingerprint is requested: the newest certificate for a new
// key, or the certificate it superseded for the newest's key again (a
// retry), at most MaxRenewals in the window. A site without a record
// (its certificate was issued before the issuer kept one) renews, and
// that renewal starts its record.
//
// The newest certificate is refused its own key: a renewal rotates the
// key (a key once copied stays useful only until its certificate
// expires), and a site that keeps its pending key never asks for the key
// it already holds a certificate for.
func (r *SiteRecord) mayRenew(presented *x509.Certificate, requested string, now time.Time) error {
	if r == nil {
		return nil
	}
	serial := serialOf(presented)
	switch {
	case !r.ReleasedAt.IsZero():
		return ErrReleased
	case serial == r.Serial && keyFingerprint(presented) == r.KeyFingerprint:
		if requested == r.KeyFingerprint {
			return ErrSameKey
		}
	case serial == r.PreviousSerial && r.PreviousSerial != "":
		if requested != r.KeyFingerprint {
			return &notRetryError{newestKey: r.KeyFingerprint}
		}
	default:
		return ErrSuperseded
	}
	if len(recentRenewals(r.Renewals, now)) >= MaxRenewals {
		return ErrRenewalRate
	}
	return nil
}

// issued is the record once issued is the site's newest certificate,
// renewed from presented (nil for an enrolment). A renewal counts against
// the rate (an enrolment, authorised by a one-time token, does not), and
// presented becomes the previous certificate: after a renewal from the
// newest it is the one superseded, after a retry it already was.
//
// The name's first enrolment (EnrolledAt, TokenID) is carried forward;
// a record started by a renewal (a certificate issued before records
// were kept) leaves it unknown.
func (r *SiteRecord) issued(network, site string, issued, presented *x509.Certificate, now time.Time) SiteRecord {
	next := SiteRecord{Network: network, Site: site, Serial: serialOf(issued), KeyFingerprint: keyFingerprint(issued), NotAfter: issued.NotAfter.UTC()}
	switch {
	case r != nil:
		next.Renewals = recentRenewals(r.Renewals, now)
		next.EnrolledAt, next.TokenID = r.EnrolledAt, r.TokenID
	case presented == nil:
		next.EnrolledAt = now.UTC()
	}
	if presented != nil {
		next.Renewals = append(next.Renewals, now.UTC())
		next.PreviousSerial = serialOf(presented)
	}
	return next
}

// mayEnrol says whether the name r records enrols under the key whose
// fingerprint is requested: a name not registered (or released) under
// any key, a registered one under its newest certificate's key only (the
// retry of an enrolment whose answer was lost, with a new token).
func (r *SiteRecord) mayEnrol(network, site, requested string) error {
	if r == nil || !r.ReleasedAt.IsZero() || r.KeyFingerprint == requested {
		return nil
	}
	return &nameRegisteredError{network: network, site: site}
}

// claimName registers site in data for the key whose fingerprint is key,
// on behalf of the token whose ID is tokenID, when the name may enrol
// under it: the claim is written with the token's spending, so of two
// enrolments of one name under two keys, one claims it and the other is
// refused, its token kept. A retry for the registered key keeps the
// record as it is (the first enrolment's time and token).
func claimName(data map[string][]byte, network, site, key, tokenID string, now time.Time) error {
	r, err := recordIn(data, network, site)
	if err != nil {
		return err
	}
	if err := r.mayEnrol(network, site, key); err != nil {
		return err
	}
	if r != nil && r.ReleasedAt.IsZero() {
		return nil
	}
	raw, err := json.Marshal(SiteRecord{Network: network, Site: site, KeyFingerprint: key, EnrolledAt: now.UTC(), TokenID: tokenID})
	if err != nil {
		return err
	}
	data[registerKey(network, site)] = raw
	return nil
}

// notRetryError refuses a renewal from the previous certificate for a key
// other than the newest's; it names that key, so that the refusal can be
// remembered (supersededSet) without refusing the retry.
type notRetryError struct{ newestKey string }

func (e *notRetryError) Error() string { return ErrNotRetry.Error() }
func (e *notRetryError) Unwrap() error { return ErrNotRetry }

// recordIn reads a site's record from the Secret's data: nil when there
// is none; a record that does not parse is refused (renewal needs the
// operator then, rather than starting over as if there were none).
func recordIn(data map[string][]byte, network, site string) (*SiteRecord, error) {
	raw, ok := data[registerKey(network, site)]
	if !ok {
		return nil, nil
	}
	var r SiteRecord
	if err := json.Unmarshal(raw, &r); err != nil || r.Network != network || r.Site != site {
		return nil, fmt.Errorf("the issuer's record of site %s in network %s does not parse", site, network)
	}
	return &r, nil
}

// readRecord reads the site's record for a check before anything is
// spent: nil when there is none.
func (t *Tokens) readRecord(ctx context.Context, network, site string) (*SiteRecord, error) {
	var s corev1.Secret
	err := t.API.Get(ctx, t.key(), &s)
	switch {
	case apierrors.IsNotFound(err):
		return nil, errNoRegister
	case err != nil:
		return nil, fmt.Errorf("the token Secret %s: %w", t.key(), err)
	}
	return recordIn(s.Data, network, site)
}

// MayRenew reads the site's record and says whether presented may renew
// it now for the key whose fingerprint is requested: a refused renewal
// costs one read, and no signature.
func (t *Tokens) MayRenew(ctx context.Context, network, site string, presented *x509.Certificate, requested string, now time.Time) error {
	r, err := t.readRecord(ctx, network, site)
	if err != nil {
		return err
	}
	return r.mayRenew(presented, requested, now)
}

// MayEnrol reads the register and says whether site may enrol under the
// key whose fingerprint is requested: a registered name under another
// key is refused for one read, before any signature and with the token
// left as it is. Claim checks again in the write that spends the token.
func (t *Tokens) MayEnrol(ctx context.Context, network, site, requested string) error {
	r, err := t.readRecord(ctx, network, site)
	if err != nil {
		return err
	}
	return r.mayEnrol(network, site, requested)
}

// RecordIssued records issued as the site's newest certificate before it
// is handed out. For a renewal (presented set) the rule is checked again
// in the same write: of two renewals with one certificate, one is
// recorded and the other refused. An enrolment's certificate is recorded
// only over the claim Claim made for its key: a name released (or
// claimed anew) since is not taken back by a certificate under way.
func (t *Tokens) RecordIssued(ctx context.Context, network, site string, presented, issued *x509.Certificate, now time.Time) error {
	err := t.update(ctx, func(s *corev1.Secret) error {
		r, err := recordIn(s.Data, network, site)
		if err != nil {
			return err
		}
		if presented != nil {
			if err := r.mayRenew(presented, keyFingerprint(issued), now); err != nil {
				return err
			}
		} else {
			switch {
			case r == nil || !r.ReleasedAt.IsZero():
				return errClaimLost
			case r.KeyFingerprint != keyFingerprint(issued):
				return &nameRegisteredError{network: network, site: site}
			}
		}
		raw, err := json.Marshal(r.issued(network, site, issued, presented, now))
		if err != nil {
			return err
		}
		s.Data[registerKey(network, site)] = raw
		return nil
	}, false)
	if errors.Is(err, errSecretMissing) {
		return errNoRegister
	}
	return err
}

// Record is the site's record, nil when there is none.
func (t *Tokens) Record(ctx context.Context, network, site string) (*SiteRecord, error) {
	var s corev1.Secret
	if err := t.API.Get(ctx, t.key(), &s); err != nil {
		return nil, err
	}
	return recordIn(s.Data, network, site)
}

// RegisteredSite is one name of the register as its operator reads it.
type RegisteredSite struct {
	SiteRecord
	// Evicted says whether the network evicts the site: the caller's set,
	// not the register's (the network's spec says which sites it evicts).
	Evicted bool
}

// Registered is the register of network: its registered names, by site
// name, each marked evicted when evicted lists it (released names are
// left out). unreadable counts the records that do not parse, of any
// network (a record's data key does not say whose it is).
func (t *Tokens) Registered(ctx context.Context, network string, evicted []string) (sites []RegisteredSite, unreadable int, err error) {
	var s corev1.Secret
	if err := t.API.Get(ctx, t.key(), &s); err != nil {
		return nil, 0, t.registerReadError(err)
	}
	for k, raw := range s.Data {
		if !isRegisterKey(k) {
			continue
		}
		var r SiteRecord
		if json.Unmarshal(raw, &r) != nil || registerKey(r.Network, r.Site) != k {
			unreadable++
			continue
		}
		if r.Network == network && r.ReleasedAt.IsZero() {
			sites = append(sites, RegisteredSite{SiteRecord: r, Evicted: slices.Contains(evicted, r.Site)})
		}
	}
	slices.SortFunc(sites, func(a, b RegisteredSite) int { return strings.Compare(a.Site, b.Site) })
	return sites, unreadable, nil
}

// registerReadError says why the register could not be read: a missing
// Secret is named, since a wrong namespace is the likely cause.
func (t *Tokens) registerReadError(err error) error {
	if apierrors.IsNotFound(err) || errors.Is(err, errSecretMissing) {
		return fmt.Errorf("the token Secret %s does not exist: no site enrolled through it (is it the issuer agent's namespace?)", t.key())
	}
	return fmt.Errorf("the token Secret %s: %w", t.key(), err)
}

// Released is what Release released: the name's record as it was (only
// Network and Site when it did not parse), and the tokens for the name
// not yet spent, which can enrol it from now on.
type Released struct {
	Record  SiteRecord
	Pending []PendingToken
}

// PendingToken is a token not yet spent, by its TokenID.
type PendingToken struct {
	ID      string
	Expires time.Time
}

// Release releases site's name in network, written with the Secret's
// resource version: from then on a token for the name enrols it under
// any key, and no certificate issued before renews (the record stays as
// a note of the release, ReleasedAt set). A record that does not parse
// is released too: releasing is how the operator starts the name over.
func (t *Tokens) Release(ctx context.Context, network, site string, now time.Time) (Released, error) {
	var out Released
	err := t.update(ctx, func(s *corev1.Secret) error {
		out = Released{Record: SiteRecord{Network: network, Site: site}}
		if _, ok := s.Data[registerKey(network, site)]; !ok {
			return fmt.Errorf("site %s in network %s: %w", site, network, ErrNotRegistered)
		}
		if r, err := recordIn(s.Data, network, site); err == nil {
			if !r.ReleasedAt.IsZero() {
				return fmt.Errorf("site %s in network %s: %w (released %s)", site, network, ErrNotRegistered, r.ReleasedAt.Format(time.RFC3339))
			}
			out.Record = *r
		}
		note := out.Record
		note.ReleasedAt, note.Renewals, note.PreviousSerial = now.UTC(), nil, ""
		raw, err := json.Marshal(note)
		if err != nil {
			return err
		}
		s.Data[registerKey(network, site)] = raw
		out.Pending = pendingFor(s.Data, network, site, now)
		return nil
	}, false)
	switch {
	case errors.Is(err, errSecretMissing):
		return Released{}, t.registerReadError(err)
	case err != nil:
		return Released{}, err
	}
	return out, nil
}

// pendingFor are the tokens in data for site in network that can still
// be spent, soonest to expire first.
func pendingFor(data map[string][]byte, network, site string, now time.Time) []PendingToken {
	var out []PendingToken
	for k, raw := range data {
		var e entry
		if isRegisterKey(k) || len(k) < TokenIDLength || json.Unmarshal(raw, &e) != nil {
			continue
		}
		if e.Network == network && e.Site == site && now.Before(e.Expires) {
			out = append(out, PendingToken{ID: k[:TokenIDLength], Expires: e.Expires})
		}
	}
	slices.SortFunc(out, func(a, b PendingToken) int { return a.Expires.Compare(b.Expires) })
	return out
}

// maxSupersededHeld bounds the superseded certificates remembered: past
// it the memory starts over (each then costs one read again).
const maxSupersededHeld = 4096

// supersededSet remembers certificates refused as superseded. A
// certificate once superseded never becomes the newest again (a
// renewal's serial is new), so a renewal presenting one again is refused
// without reading the Secret: a leaked old key renewing in a loop costs
// no API read beyond its first. The previous certificate is remembered
// with the newest key, the one key it may still ask for (a retry): that
// request goes on to the register, any other is refused here. While a
// certificate is the previous one the newest key does not change (a
// retry asks for it again; a renewal from the newest makes the newest
// the previous), so remembering it refuses no retry the register would
// answer.
type supersededSet struct {
	mu   sync.Mutex
	held map[string]supersededCert // key: network/site/serial/key fingerprint
}

type supersededCert struct {
	notAfter time.Time
	// retryKey is the fingerprint of the key a retry from this
	// certificate asks for; "" when it may ask for none.
	retryKey string
}

func supersededKey(network, site string, c *x509.Certificate) string {
	return network + "/" + site + "/" + serialOf(c) + "/" + keyFingerprint(c)
}

// refusal is the refusal of a renewal from c for the requested key
// without reading the register, nil when the register decides.
func (s *supersededSet) refusal(network, site string, c *x509.Certificate, requested string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	held, ok := s.held[supersededKey(network, site, c)]
	switch {
	case !ok || held.retryKey != "" && held.retryKey == requested:
		return nil
	case held.retryKey != "":
		return ErrNotRetry
	default:
		return ErrSuperseded
	}
}

// add remembers c, first dropping the certificates that have expired
// (the listener refuses them before they are presented) when the set is
// full, and every one when that makes no room.
func (s *supersededSet) add(network, site string, c *x509.Certificate, retryKey string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = map[string]supersededCert{}
	}
	if len(s.held) >= maxSupersededHeld {
		for k, held := range s.held {
			if !now.Before(held.notAfter) {
				delete(s.held, k)
			}
		}
		if len(s.held) >= maxSupersededHeld {
			clear(s.held)
		}
	}
	s.held[supersededKey(network, site, c)] = supersededCert{notAfter: c.NotAfter, retryKey: retryKey}
}
