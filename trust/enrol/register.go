package enrol

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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
	errNoRegister  = errors.New("the issuer's token Secret does not exist (gridsync-agent enroll-token makes it); the certificates issued cannot be recorded")
)

// A record's Secret data key: the prefix, then the first bytes of a hash
// of the network and site names, hex.
const (
	registerPrefix  = "site-"
	registerKeyHash = 20
)

// SiteRecord is what the issuer keeps of a site it issued a certificate
// to, in the token Secret beside the tokens (the one Secret the issuer
// may update, so that recording needs no further access): the newest
// certificate, by serial, the one it superseded, and the times of the
// site's recent renewals. A renewal from the newest certificate is for a
// new key; a renewal from the one it superseded is for the newest's key
// only, the retry of a renewal whose answer the site did not get (the
// site keeps the key it asked for until it holds its certificate); any
// other renewal is refused, and that holds across restarts of the
// issuer.
type SiteRecord struct {
	Network string `json:"network"`
	Site    string `json:"site"`
	// Serial is the newest certificate's serial number (hex) and
	// KeyFingerprint the SHA-256 of its public key (SubjectPublicKeyInfo,
	// hex): the certificate and the key a renewal must come from.
	Serial         string    `json:"serial"`
	KeyFingerprint string    `json:"keyFingerprint"`
	NotAfter       time.Time `json:"notAfter"`
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
func (r *SiteRecord) issued(network, site string, issued, presented *x509.Certificate, now time.Time) SiteRecord {
	next := SiteRecord{Network: network, Site: site, Serial: serialOf(issued), KeyFingerprint: keyFingerprint(issued), NotAfter: issued.NotAfter.UTC()}
	if r != nil {
		next.Renewals = recentRenewals(r.Renewals, now)
	}
	if presented != nil {
		next.Renewals = append(next.Renewals, now.UTC())
		next.PreviousSerial = serialOf(presented)
	}
	return next
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

// MayRenew reads the site's record and says whether presented may renew
// it now for the key whose fingerprint is requested: a refused renewal
// costs one read, and no signature.
func (t *Tokens) MayRenew(ctx context.Context, network, site string, presented *x509.Certificate, requested string, now time.Time) error {
	var s corev1.Secret
	err := t.API.Get(ctx, t.key(), &s)
	switch {
	case apierrors.IsNotFound(err):
		return errNoRegister
	case err != nil:
		return fmt.Errorf("the token Secret %s: %w", t.key(), err)
	}
	r, err := recordIn(s.Data, network, site)
	if err != nil {
		return err
	}
	return r.mayRenew(presented, requested, now)
}

// RecordIssued records issued as the site's newest certificate before it
// is handed out. For a renewal (presented set) the rule is checked again
// in the same write: of two renewals with one certificate, one is
// recorded and the other refused.
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
