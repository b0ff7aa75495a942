package membership

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/shared/keypolicy"
	"github.com/gridsync/gridsync/trust/bundle"
	"github.com/gridsync/gridsync/trust/enrol"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Reasons of the SiteIdentity condition of an enrolled site.
const (
	ReasonSiteCertificateEnrolled = "SiteCertificateEnrolled"
	ReasonSiteCertificateRenewed  = "SiteCertificateRenewed"
	ReasonEnrollmentTokenMissing  = "EnrollmentTokenMissing"
	ReasonEnrollmentRefused       = "EnrollmentRefused"
	ReasonIssuerUnreachable       = "IssuerUnreachable"
	ReasonIdentityExpired         = "IdentityExpired"
)

// enrolRetryRefused is the least wait after the issuer refused (but for
// a refusal that passes by itself, transientRefusal), or before the
// enrolment token is read again when there is none: time for the
// operator to act. Other failures are tried again sooner (retryDelay).
const enrolRetryRefused = 2 * time.Minute

// Rotation results (grid_site_identity_rotations_total{result}), as
// upstream names them, and enrolled for a site's first certificate.
const (
	rotationEnrolled = "enrolled"
	rotationRotated  = "rotated"
	rotationRefused  = "refused"
	rotationFailed   = "failed"
	rotationExpired  = "expired"
)

// RotationResults are the result label values of
// grid_site_identity_rotations_total, set up at zero when it is
// registered.
func RotationResults() []string {
	return []string{rotationEnrolled, rotationRotated, rotationRefused, rotationFailed, rotationExpired}
}

// siteCertificateMode is how the network's site obtains its certificate;
// "" when spec.tls.siteCertificate is unset (issued when the CA's key is
// here, provided otherwise).
func siteCertificateMode(t *v1alpha1.GridTLS) v1alpha1.SiteCertificateMode {
	if t == nil || t.SiteCertificate == nil {
		return ""
	}
	return t.SiteCertificate.Mode
}

// gridCACertificate is the grid CA's certificate (caConfigMapRef, else
// ca.crt or tls.crt of caSecretRef), as the trust material the probes and
// the record checks use holds it: never generated, since an enrolled or
// provided site only trusts the CA the issuer made.
func (r *Identity) gridCACertificate(ctx context.Context, network *v1alpha1.GridNetwork) (*x509.Certificate, *Condition) {
	tm := r.Trust.Get(ctx, network)
	if p := tm.RootsProblem; p != nil {
		reason := ReasonGridCAUnreadable
		if p.Invalid {
			reason = ReasonGridCAInvalid
		}
		return nil, &Condition{Reason: reason, Message: p.Message}
	}
	return tm.RootCerts[0], nil
}

// enrolled obtains or renews this site's certificate from the issuer:
// renewed with the current certificate while it is valid, enrolled with
// the one-time token otherwise. The new key is made here and never leaves
// the cluster; the certificate the issuer returns is checked (the grid
// CA, the site profile for this site, this key) before it is written.
func (r *Identity) enrolled(ctx context.Context, network *v1alpha1.GridNetwork, at string, exists bool, secret *corev1.Secret,
	held *sitetrust.Held, heldErr error, caCert *x509.Certificate, roots []*x509.Certificate, now time.Time) IdentityOutcome {
	var out IdentityOutcome
	site := r.Opts.SiteName
	sc := network.Spec.TLS.SiteCertificate
	ref := network.Spec.TLS.SiteSecretRef
	if exists && heldErr == nil {
		r.Metrics.IdentityExpiry.WithLabelValues(network.Name).Set(float64(held.Leaf.NotAfter.Unix()))
		out.GossipCert, out.GossipErr = gossipable(at, secret.Data[corev1.TLSCertKey])
	}
	why := reissueWhy(exists, held, heldErr, caCert, site, now)
	if why == "" {
		r.retryDone(network.Name)
		renew := sitetrust.RenewAt(held.Leaf)
		out.RenewIn = renew.Sub(now)
		out.Condition = Condition{OK: true, Reason: ReasonSiteCertificateCurrent, Message: fmt.Sprintf("site %s's certificate from issuer %s is valid until %s and is renewed at %s",
			site, sc.Issuer.Site, held.Leaf.NotAfter.UTC().Format(time.RFC3339), renew.UTC().Format(time.RFC3339))}
		r.keepSiteCAs(ctx, network, secret, roots, &out)
		return out
	}
	// The current certificate authenticates a renewal while it is valid
	// under the grid CA; otherwise the token enrols the site afresh.
	var current *tls.Certificate
	var notAfter time.Time
	what := "enrolment"
	if exists && heldErr == nil && now.Before(held.Leaf.NotAfter) && validUnder(held, roots, site) {
		current, notAfter, what = &held.Pair, held.Leaf.NotAfter, "renewal"
	}
	// An enrolment needs the token the issuer's operator gave; a new one
	// is tried at once, whatever the last failure's turn.
	token := ""
	if current == nil {
		t, cond := r.enrollmentToken(ctx, sc)
		if cond != nil {
			out.Condition, out.RenewIn = *cond, enrolRetryRefused
			return out
		}
		token = t
	}
	// After a failure the issuer is asked again in its turn only.
	if cond, wait, ok := r.retryPending(network, token, now); ok {
		out.Condition, out.RenewIn = cond, wait
		return out
	}
	fail := func(cond Condition, result string, floor time.Duration, err error) IdentityOutcome {
		r.Metrics.IdentityRotations.WithLabelValues(result).Inc()
		if current == nil && exists && heldErr == nil && !now.Before(held.Leaf.NotAfter) {
			cond.Reason = ReasonIdentityExpired
			cond.Message = fmt.Sprintf("site %s's certificate expired at %s and cannot be renewed: %s", site, held.Leaf.NotAfter.UTC().Format(time.RFC3339), cond.Message)
		}
		out.Condition, out.RenewIn = r.failed(network, what, cond, floor, notAfter, now)
		r.retriedWith(network.Name, token)
		r.Opts.Logger.Warn("site_enrollment_failed", "network", network.Name, "site", site, "issuer", sc.Issuer.Site, "reason", out.Condition.Reason,
			"retry_in", out.RenewIn.Round(time.Millisecond).String(), "error", err.Error())
		return out
	}
	req := enrol.Request{Network: network.Name, Site: site, Token: token}
	if current == nil && exists && heldErr == nil && !now.Before(held.Leaf.NotAfter) {
		r.Metrics.IdentityRotations.WithLabelValues(rotationExpired).Inc()
	}
	key, keyPEM, err := r.pendingKey(ctx, network, exists, secret, held)
	if err != nil {
		return fail(Condition{Reason: ReasonSiteCertificateFailed, Message: fmt.Sprintf("%s: the key to be certified could not be kept: %s", at, base.APIFailure(err, "write", "Secret"))}, rotationFailed, 0, err)
	}
	csr, err := enrol.CertificateRequest(key)
	if err != nil {
		return fail(Condition{Reason: ReasonSiteCertificateFailed, Message: err.Error()}, rotationFailed, 0, err)
	}
	req.CSR = string(csr)
	pool := x509.NewCertPool()
	for _, c := range roots {
		pool.AddCert(c)
	}
	c := enrol.Client{Dial: r.Opts.ProbeDestinations.Dialer(r.Opts.SiteProbeTimeout), Timeout: r.Opts.SiteProbeTimeout}
	chain, err := c.Request(ctx, enrol.Issuer{Address: sc.Issuer.Address, Site: sc.Issuer.Site}, pool, req, current, key)
	if err != nil {
		var refused *enrol.RefusedError
		var unreachable *enrol.UnreachableError
		switch {
		case errors.As(err, &refused):
			floor := enrolRetryRefused
			if transientRefusal(refused.Reason) {
				floor = 0
			}
			out := fail(Condition{Reason: ReasonEnrollmentRefused, Message: fmt.Sprintf("issuer %s refused: %s", sc.Issuer.Site, refused.Message)}, rotationRefused, floor, err)
			if refused.Reason == enrol.RefusedBusy {
				out.RenewIn = r.soonerAfterBusy(network.Name, out.RenewIn, now)
			}
			return out
		case errors.As(err, &unreachable):
			return fail(Condition{Reason: ReasonIssuerUnreachable, Message: err.Error()}, rotationFailed, 0, err)
		default:
			return fail(Condition{Reason: ReasonSiteCertificateFailed, Message: err.Error()}, rotationFailed, 0, err)
		}
	}
	// The certificate and its key replace the current pair, and the
	// pending key goes, in one write: until it succeeds the pending key
	// stays, and the next attempt asks again for it.
	if err := r.writeSiteSecret(ctx, network, exists, secret, chain, keyPEM, roots); err != nil {
		return fail(Condition{Reason: ReasonSiteCertificateFailed, Message: fmt.Sprintf("%s: %s", at, base.APIFailure(err, "write", "Secret"))}, rotationFailed, 0, err)
	}
	r.retryDone(network.Name)
	r.firstKeys.forget(network.Name)
	issued, err := sitetrust.ParseHeld(chain, keyPEM)
	if err != nil {
		out.Condition = Condition{Reason: ReasonSiteCertificateFailed, Message: err.Error()}
		return out
	}
	result, reason, verb := rotationEnrolled, ReasonSiteCertificateEnrolled, "enrolled"
	if current != nil {
		result, reason, verb = rotationRotated, ReasonSiteCertificateRenewed, "renewed"
	}
	r.Metrics.IdentityRotations.WithLabelValues(result).Inc()
	r.Metrics.IdentityExpiry.WithLabelValues(network.Name).Set(float64(issued.Leaf.NotAfter.Unix()))
	out.Wrote = true
	out.GossipCert, out.GossipErr = string(chain), nil
	renew := sitetrust.RenewAt(issued.Leaf)
	out.RenewIn = renew.Sub(now)
	r.Opts.Logger.Info("site_certificate_"+verb, "network", network.Name, "site", site, "issuer", sc.Issuer.Site,
		"because", why, "not_after", issued.Leaf.NotAfter.UTC().Format(time.RFC3339), "fingerprint", sitetrust.Fingerprint(issued.Leaf.Raw))
	r.Events.Record(ctx, network, "GridNetwork", corev1.EventTypeNormal, reason,
		fmt.Sprintf("site %s's certificate %s by issuer %s into Secret %s/%s; valid until %s", site, verb, sc.Issuer.Site, ref.Namespace, ref.Name, issued.Leaf.NotAfter.UTC().Format(time.RFC3339)))
	out.Condition = Condition{OK: true, Reason: reason, Message: fmt.Sprintf("site %s's certificate %s by issuer %s (%s); valid until %s, renewed at %s",
		site, verb, sc.Issuer.Site, why, issued.Leaf.NotAfter.UTC().Format(time.RFC3339), renew.UTC().Format(time.RFC3339))}
	return out
}

// keyPendingData is the site Secret's data key of the key a request asked
// the issuer to certify, kept until its certificate is written: the
// issuer records a renewal before it answers, and answers the retry of a
// renewal from the same certificate for the same key only (a renewal
// whose answer was lost, or whose certificate could not be written, is
// retried so). The Secret already holds the site's key, so the pending
// key is kept no wider; the gateways mount tls.crt and tls.key only.
const keyPendingData = "pending.key"

// pendingKey is the key a request asks to be certified, with its PEM:
// the one kept in the site Secret from an earlier request that did not
// end with its certificate written, or else a new one, kept there before
// it is sent. A kept key that does not parse, is not of a kind accepted,
// or is the current certificate's own is replaced. Without a site Secret
// (a first enrolment) the key is kept in memory until the Secret is
// written: the issuer's register answers a second enrolment of the name
// for that key only (with a new token), and the Secret is created, of
// type kubernetes.io/tls, with the certificate. An agent restarted in
// between asks for a new key, which the issuer's operator must allow by
// releasing the name. The key is never logged.
func (r *Identity) pendingKey(ctx context.Context, network *v1alpha1.GridNetwork, exists bool, secret *corev1.Secret, held *sitetrust.Held) (crypto.Signer, []byte, error) {
	if exists {
		r.firstKeys.forget(network.Name)
		if key, ok := usablePendingKey(secret.Data[keyPendingData], held); ok {
			return key, secret.Data[keyPendingData], nil
		}
		keyPEM, err := newKeyPEM()
		if err != nil {
			return nil, nil, err
		}
		if err := r.keepPendingKey(ctx, network, secret, keyPEM); err != nil {
			return nil, nil, err
		}
		key, _ := usablePendingKey(keyPEM, nil)
		return key, keyPEM, nil
	}
	keyPEM, err := r.firstKeys.take(network.Name, newKeyPEM)
	if err != nil {
		return nil, nil, err
	}
	key, ok := usablePendingKey(keyPEM, nil)
	if !ok {
		return nil, nil, errors.New("the first enrolment's key does not parse")
	}
	return key, keyPEM, nil
}

// newKeyPEM is a new site key, PKCS #8 PEM.
func newKeyPEM() ([]byte, error) {
	key, _, err := enrol.NewKey()
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// usablePendingKey parses a kept pending key: a PKCS #8 private key of a
// kind gridsync accepts, not the key of the certificate held.
func usablePendingKey(keyPEM []byte, held *sitetrust.Held) (crypto.Signer, bool) {
	b, _ := pem.Decode(keyPEM)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, false
	}
	parsed, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, false
	}
	key, ok := parsed.(crypto.Signer)
	if !ok || keypolicy.CheckPublicKey(key.Public()) != nil {
		return nil, false
	}
	if held != nil {
		spki, err := x509.MarshalPKIXPublicKey(key.Public())
		if err != nil || bytes.Equal(spki, held.Leaf.RawSubjectPublicKeyInfo) {
			return nil, false
		}
	}
	return key, true
}

// enrollmentToken reads the one-time token the issuer's operator gave.
func (r *Identity) enrollmentToken(ctx context.Context, sc *v1alpha1.SiteCertificate) (string, *Condition) {
	ref := sc.EnrollmentTokenSecretRef
	if ref == nil {
		return "", &Condition{Reason: ReasonEnrollmentTokenMissing, Message: "the site has no valid certificate and spec.tls.siteCertificate.enrollmentTokenSecretRef names no token: ask the issuer's operator for one (gridsync-agent enroll-token)"}
	}
	key := ref.Key
	if key == "" {
		key = "token"
	}
	at := fmt.Sprintf("spec.tls.siteCertificate.enrollmentTokenSecretRef (Secret %s/%s, key %s)", ref.Namespace, ref.Name, key)
	var s corev1.Secret
	if err := r.API.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &s); err != nil {
		return "", &Condition{Reason: ReasonEnrollmentTokenMissing, Message: at + ": " + base.APIFailure(err, "get", "Secret")}
	}
	token := string(s.Data[key])
	if token == "" {
		return "", &Condition{Reason: ReasonEnrollmentTokenMissing, Message: at + ": the key is missing or empty"}
	}
	return token, nil
}

// EnrolmentAuthority is the issuer's side of enrolment: for a network
// whose site certificates this site issues (spec.tls.siteCertificate.mode
// issuer, or unset with the grid CA's key in caSecretRef), its CA and the
// sites whose renewal and enrolment it refuses (refuseRenewal, and the
// sites its trust bundle evicts). What it issues to a site whose eviction
// was lifted starts after the eviction, so that only certificates issued
// since readmit it; what it issues lives as the network's certificates
// do (SiteLifetime). It reads the GridNetwork and the CA Secret uncached,
// by name.
func EnrolmentAuthority(api client.Reader, book *bundle.Book) enrol.CA {
	return authority{api: api, book: book}
}

type authority struct {
	api  client.Reader
	book *bundle.Book
}

func (a authority) Authority(ctx context.Context, name string) (*sitetrust.CA, []string, error) {
	var network v1alpha1.GridNetwork
	if err := a.api.Get(ctx, types.NamespacedName{Name: name}, &network); err != nil {
		return nil, nil, fmt.Errorf("network %s is not issued for here", name)
	}
	ca, err := issuerCA(ctx, a.api, &network)
	if err != nil {
		return nil, nil, err
	}
	var refused []string
	if sc := network.Spec.TLS.SiteCertificate; sc != nil {
		refused = append(slices.Clone(sc.RefuseRenewal), sc.EvictedSites...)
	}
	held := a.book.Bundle(name)
	refused = append(refused, held.EvictedSites()...)
	ca.IssueFloor = held.IssueFloor
	// What an enrolment or renewal is issued for when the enrolment
	// server is given no lifetime of its own: the network's.
	ca.SiteLifetime = SiteLifetime(&network, 0)
	return ca, refused, nil
}

// The CA Secret's keys during a rotation of the grid CA: the new CA beside
// the one that issues (next.*), then, once the new one issues, the old one
// beside it (previous.*), until it is retired.
const (
	caNextCert     = "next.crt"
	caNextKey      = "next.key"
	caPreviousCert = "previous.crt"
	caPreviousKey  = "previous.key"
)

// issuerCA is the grid CA of a network this site issues for, with its
// key, and the other CAs of a rotation under way (which a renewal may
// present a certificate of); an error when the network is not issued for
// here.
func issuerCA(ctx context.Context, api client.Reader, network *v1alpha1.GridNetwork) (*sitetrust.CA, error) {
	set, err := issuerCAs(ctx, api, network)
	if err != nil {
		return nil, err
	}
	for _, other := range []*sitetrust.CA{set.next, set.previous} {
		if other != nil {
			set.current.Also = append(set.current.Also, other.Cert)
		}
	}
	return set.current, nil
}

// caSet are the grid CAs of a network this site issues for, with their
// keys: the one that issues, and during a rotation the new one beside it
// (next.*) or, once the new one issues, the old one (previous.*).
type caSet struct{ current, next, previous *sitetrust.CA }

// all are the CAs, the one that issues first.
func (c caSet) all() []*sitetrust.CA {
	out := []*sitetrust.CA{c.current}
	for _, ca := range []*sitetrust.CA{c.next, c.previous} {
		if ca != nil {
			out = append(out, ca)
		}
	}
	return out
}

// newest is the CA a rotation moves to (the one that issues when none is
// under way).
func (c caSet) newest() *sitetrust.CA {
	if c.next != nil {
		return c.next
	}
	return c.current
}

// stage is where a rotation stands: Added (a new CA beside the one that
// issues), Issuing (the new CA issues, the old one still trusted), or
// Retired (one CA).
func (c caSet) stage() string {
	switch {
	case c.next != nil:
		return v1alpha1.CARotationAdded
	case c.previous != nil:
		return v1alpha1.CARotationIssuing
	default:
		return v1alpha1.CARotationRetired
	}
}

func issuerCAs(ctx context.Context, api client.Reader, network *v1alpha1.GridNetwork) (caSet, error) {
	name := network.Name
	t := network.Spec.TLS
	mode := siteCertificateMode(t)
	if t == nil || t.CASecretRef == nil || mode == v1alpha1.SiteCertificateEnrolled || mode == v1alpha1.SiteCertificateProvided {
		return caSet{}, fmt.Errorf("network %s is not issued for here", name)
	}
	var s corev1.Secret
	if err := api.Get(ctx, types.NamespacedName{Namespace: t.CASecretRef.Namespace, Name: t.CASecretRef.Name}, &s); err != nil {
		return caSet{}, fmt.Errorf("network %s: the grid CA cannot be read here", name)
	}
	if len(s.Data[corev1.TLSPrivateKeyKey]) == 0 {
		return caSet{}, fmt.Errorf("network %s is not issued for here", name)
	}
	current, err := sitetrust.ParseCA(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return caSet{}, fmt.Errorf("network %s: the grid CA is not usable here", name)
	}
	set := caSet{current: current}
	for _, k := range []struct {
		cert, key string
		into      **sitetrust.CA
	}{{caNextCert, caNextKey, &set.next}, {caPreviousCert, caPreviousKey, &set.previous}} {
		if len(s.Data[k.cert]) == 0 {
			continue
		}
		if *k.into, err = sitetrust.ParseCA(s.Data[k.cert], s.Data[k.key]); err != nil {
			return caSet{}, fmt.Errorf("network %s: the grid CA's %s is not usable here", name, k.cert)
		}
	}
	return set, nil
}
