// Package membership is the GridNetwork membership reconciler (controller
// gridnetwork-membership): it keeps this site a member of each network's
// grid. Its stages are the site's identity (Identity: the grid CA and the
// site certificate, issued, enrolled or provided), its membership (Member:
// SWIM keys, seeds, this site's records, what is known of the other
// sites), the GridSites of the discovered sites, and the poll of the
// Secrets these read; it writes the network's membership conditions,
// phase and counts. The overlay reconciler reads them from the status,
// and hands it this site's providers (Locals).
package membership

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/trustmaterial"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/trust/bundle"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// ConditionSiteIdentity is the network's condition on this site's
// certificate.
const ConditionSiteIdentity = "SiteIdentity"

// Reasons of the SiteIdentity condition.
const (
	ReasonSiteCertificateIssued  = "SiteCertificateIssued"
	ReasonSiteCertificateCurrent = "SiteCertificateCurrent"
	ReasonSiteCertificateGiven   = "SiteCertificateProvided"
	ReasonNoSiteIdentity         = "NoSiteIdentity"
	ReasonGridCAUnreadable       = "GridCAUnreadable"
	ReasonGridCAInvalid          = "GridCAInvalid"
	ReasonGridCAGenerationFailed = "GridCAGenerationFailed"
	ReasonSiteSecretUnreadable   = "SiteSecretUnreadable"
	ReasonSiteNameMissing        = "SiteNameMissing"
	ReasonSiteCertificateMissing = "SiteCertificateMissing"
	ReasonSiteCertificateFailed  = "SiteCertificateIssueFailed"
	ReasonSiteSecretConflict     = "SiteSecretConflict"
)

// Secret keys of the CA and site Secrets.
const (
	keyCACert = trustmaterial.KeyCACert
)

// Identity is the site identity stage of a network's reconcile: the grid
// CA and this site's certificate, issued here, obtained from the issuer
// (enrolment and renewal) or provided.
type Identity struct {
	*base.Env
	Trust *trustmaterial.Cache
	// retries are the networks whose last attempt failed.
	retries retries
	// firstKeys are the keys of first enrolments not yet written, by
	// network: with no site Secret to keep it in, a first enrolment keeps
	// its key here, so that its retry (an answer lost, a Secret not
	// written) asks again for the key the issuer's register holds for
	// the name, and is answered.
	firstKeys firstKeys
}

type firstKeys struct {
	mu sync.Mutex
	m  map[string][]byte
}

// take is the kept first-enrolment key of network, or newKey's, kept.
func (k *firstKeys) take(network string, newKey func() ([]byte, error)) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if keyPEM, ok := k.m[network]; ok {
		return keyPEM, nil
	}
	keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	if k.m == nil {
		k.m = map[string][]byte{}
	}
	k.m[network] = keyPEM
	return keyPEM, nil
}

func (k *firstKeys) forget(network string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, network)
}

// Condition is a condition's verdict, reason and message, as a stage
// reports it for the network's status.
type Condition struct {
	OK              bool
	Reason, Message string
}

// IdentityOutcome is what one reconcile did with the site's identity.
type IdentityOutcome struct {
	Condition Condition
	// RenewIn is how soon the network is reconciled again to renew the
	// certificate; 0 when nothing is due.
	RenewIn time.Duration
	// Wrote: a CA or site Secret was written, so trust material changed.
	Wrote bool
	// GossipCert is the public certificate gossiped to the other sites:
	// tls.crt of the site Secret as read or as issued (never tls.key);
	// GossipErr says why none is.
	GossipCert string
	GossipErr  error
}

// Reconcile makes sure of the grid CA and this site's certificate:
// a CA Secret that does not exist is generated (the first site of a grid;
// the others receive the same Secret out of band, the agent never copies
// Secrets between clusters), and the site certificate is issued into
// siteSecretRef when it is missing, not the CA's, not in the site profile
// or two thirds through its lifetime. Keys never leave the Secrets: not in
// logs, events or status.
func (r *Identity) Reconcile(ctx context.Context, network *v1alpha1.GridNetwork) IdentityOutcome {
	t := network.Spec.TLS
	if t == nil || t.SiteSecretRef == nil && t.CASecretRef == nil {
		return IdentityOutcome{Condition: Condition{OK: true, Reason: ReasonNoSiteIdentity, Message: "spec.tls names no grid CA or site Secret"}}
	}
	now := r.Opts.Now()
	var out IdentityOutcome
	// The site Secret first: its certificate is gossiped whatever the
	// state of the CA.
	ref := t.SiteSecretRef
	var at string
	var secret corev1.Secret
	var exists bool
	if ref != nil {
		at = fmt.Sprintf("spec.tls.siteSecretRef (Secret %s/%s)", ref.Namespace, ref.Name)
		err := r.API.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &secret)
		if err != nil && !apierrors.IsNotFound(err) {
			out.GossipErr = fmt.Errorf("%s: %s", at, base.APIFailure(err, "get", "Secret"))
			out.Condition = Condition{Reason: ReasonSiteSecretUnreadable, Message: out.GossipErr.Error()}
			return out
		}
		if exists = err == nil; exists {
			out.GossipCert, out.GossipErr = gossipable(at, secret.Data[corev1.TLSCertKey])
		}
	}
	mode := siteCertificateMode(t)
	var ca *sitetrust.CA
	var caCert *x509.Certificate
	switch {
	case mode == v1alpha1.SiteCertificateEnrolled || mode == v1alpha1.SiteCertificateProvided:
		// The CA is the issuer's: read, never generated, its key unused.
		if network.HasGridCA() {
			cert, cond := r.gridCACertificate(ctx, network)
			if cond != nil {
				out.Condition = *cond
				return out
			}
			caCert = cert
		}
	case t.CASecretRef != nil:
		c, cert, wrote, cond := r.gridCA(ctx, network, t.CASecretRef, now)
		if cond != nil {
			out.Condition, out.Wrote = *cond, wrote
			return out
		}
		ca, caCert, out.Wrote = c, cert, wrote
		if mode == v1alpha1.SiteCertificateIssuer && ca == nil {
			out.Condition = Condition{Reason: ReasonGridCAInvalid, Message: fmt.Sprintf("spec.tls.siteCertificate.mode issuer: Secret %s/%s holds the grid CA's certificate without its key (tls.key)", t.CASecretRef.Namespace, t.CASecretRef.Name)}
			return out
		}
	}
	if ref == nil {
		out.Condition = Condition{OK: true, Reason: ReasonNoSiteIdentity, Message: "the grid CA is ready; spec.tls.siteSecretRef names no site certificate to issue"}
		return out
	}
	// The CAs the network trusts now (two during a rotation of the grid
	// CA): a certificate valid under any renews with the issuer, and the
	// site Secret's ca.crt holds them all, so that the gateway and the
	// listener accept the other sites' certificates of either.
	roots := r.Trust.Get(ctx, network).RootCerts
	if caCert != nil && !slices.ContainsFunc(roots, caCert.Equal) {
		roots = append([]*x509.Certificate{caCert}, roots...)
	}
	if mode == v1alpha1.SiteCertificateEnrolled {
		caCert = issuingCA(caCert, roots, r.Opts.TrustBundles.Bundle(network.Name))
	}
	var held *sitetrust.Held
	var heldErr error
	if exists {
		held, heldErr = sitetrust.ParseHeld(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	}
	site := r.Opts.SiteName
	if exists && heldErr == nil {
		r.Metrics.IdentityExpiry.WithLabelValues(network.Name).Set(float64(held.Leaf.NotAfter.Unix()))
	}
	if mode == v1alpha1.SiteCertificateEnrolled {
		switch {
		case caCert == nil:
			out.Condition = Condition{Reason: ReasonGridCAUnreadable, Message: "an enrolled site needs the grid CA's certificate: spec.tls.caConfigMapRef or caSecretRef (ca.crt)"}
		case site == "":
			out.Condition = Condition{Reason: ReasonSiteNameMissing, Message: "the agent has no site name (--site-name, GRID_SWIM_SITE_NAME): it cannot enrol"}
		default:
			return r.enrolled(ctx, network, at, exists, &secret, held, heldErr, caCert, roots, now)
		}
		return out
	}
	if ca == nil {
		// The CA's key is not here: the site certificate is provided.
		switch {
		case !exists:
			out.Condition = Condition{Reason: ReasonSiteCertificateMissing, Message: at + ": the Secret does not exist, and without the grid CA's key (spec.tls.caSecretRef with tls.key) this agent cannot issue it"}
		case heldErr != nil:
			out.Condition = Condition{Reason: ReasonSiteCertificateMissing, Message: fmt.Sprintf("%s: %v; without the grid CA's key this agent cannot issue it", at, heldErr)}
		case now.After(held.Leaf.NotAfter):
			out.Condition = Condition{Reason: ReasonSiteCertificateMissing, Message: fmt.Sprintf("%s: the provided certificate expired at %s", at, held.Leaf.NotAfter.UTC().Format(time.RFC3339))}
		default:
			out.Condition = Condition{OK: true, Reason: ReasonSiteCertificateGiven, Message: fmt.Sprintf("%s: provided, valid until %s (not issued by this agent)", at, held.Leaf.NotAfter.UTC().Format(time.RFC3339))}
		}
		return out
	}
	if site == "" {
		out.Condition = Condition{Reason: ReasonSiteNameMissing, Message: "the agent has no site name (--site-name, GRID_SWIM_SITE_NAME): no site certificate is issued"}
		return out
	}
	why := reissueWhy(exists, held, heldErr, caCert, site, now)
	if why == "" {
		r.retryDone(network.Name)
		renew := sitetrust.RenewAt(held.Leaf)
		out.RenewIn = renew.Sub(now)
		out.Condition = Condition{OK: true, Reason: ReasonSiteCertificateCurrent, Message: fmt.Sprintf("site %s's certificate is valid until %s and is renewed at %s",
			site, held.Leaf.NotAfter.UTC().Format(time.RFC3339), renew.UTC().Format(time.RFC3339))}
		r.keepSiteCAs(ctx, network, &secret, roots, &out)
		return out
	}
	// Another network that names the same Secret and still exists holds
	// it: two networks with two CAs would otherwise reissue it in turn at
	// every reconcile. With the same CA it is shared, and its holder
	// renews it.
	if holder := secret.Labels[envelope.LabelNetwork]; exists && secret.Labels[envelope.LabelManagedBy] == r.Opts.Producer &&
		holder != "" && holder != network.Name && r.networkExists(ctx, holder) {
		// Valid under this network's CA now, only its renewal due.
		if heldErr == nil && now.Before(held.Leaf.NotAfter) && validUnder(held, roots, site) {
			out.Condition = Condition{OK: true, Reason: ReasonSiteCertificateCurrent, Message: fmt.Sprintf("%s: shared with GridNetwork %s, which renews it; valid until %s",
				at, holder, held.Leaf.NotAfter.UTC().Format(time.RFC3339))}
			return out
		}
		out.Condition = Condition{Reason: ReasonSiteSecretConflict, Message: fmt.Sprintf("%s: issued for GridNetwork %s from another grid CA; give each network its own site Secret, or both the same grid CA", at, holder)}
		return out
	}
	// After a failure the certificate is issued again in its turn only.
	if cond, wait, ok := r.retryPending(network, "", now); ok {
		out.Condition, out.RenewIn = cond, wait
		return out
	}
	var notAfter time.Time
	what := "issuing"
	if exists && heldErr == nil && now.Before(held.Leaf.NotAfter) && validUnder(held, roots, site) {
		notAfter, what = held.Leaf.NotAfter, "renewal"
	}
	chain, key, err := ca.Issue(site, now, SiteLifetime(network, r.Opts.SiteCertLifetime))
	if err != nil {
		r.Metrics.IdentityRotations.WithLabelValues(rotationFailed).Inc()
		out.Condition, out.RenewIn = r.failed(network, what, Condition{Reason: ReasonSiteCertificateFailed, Message: fmt.Sprintf("%s: issuing failed: %v", at, err)}, 0, notAfter, now)
		return out
	}
	if err := r.writeSiteSecret(ctx, network, exists, &secret, chain, key, roots); err != nil {
		r.Metrics.IdentityRotations.WithLabelValues(rotationFailed).Inc()
		out.Condition, out.RenewIn = r.failed(network, what, Condition{Reason: ReasonSiteCertificateFailed, Message: fmt.Sprintf("%s: %s", at, base.APIFailure(err, "write", "Secret"))}, 0, notAfter, now)
		r.Opts.Logger.Error("site_certificate_not_written", "network", network.Name, "secret", ref.Namespace+"/"+ref.Name,
			"retry_in", out.RenewIn.Round(time.Millisecond).String(), "error", err.Error())
		return out
	}
	r.retryDone(network.Name)
	issued, err := sitetrust.ParseHeld(chain, key)
	if err != nil {
		out.Condition = Condition{Reason: ReasonSiteCertificateFailed, Message: err.Error()}
		return out
	}
	out.Wrote = true
	out.GossipCert, out.GossipErr = string(chain), nil
	renew := sitetrust.RenewAt(issued.Leaf)
	out.RenewIn = renew.Sub(now)
	r.Metrics.SiteCertificates.Inc()
	r.Metrics.IdentityExpiry.WithLabelValues(network.Name).Set(float64(issued.Leaf.NotAfter.Unix()))
	if exists && heldErr == nil {
		r.Metrics.IdentityRotations.WithLabelValues(rotationRotated).Inc()
	}
	r.Opts.Logger.Info("site_certificate_issued", "network", network.Name, "site", site, "secret", ref.Namespace+"/"+ref.Name,
		"because", why, "not_after", issued.Leaf.NotAfter.UTC().Format(time.RFC3339), "fingerprint", sitetrust.Fingerprint(issued.Leaf.Raw))
	r.Events.Record(ctx, network, "GridNetwork", corev1.EventTypeNormal, ReasonSiteCertificateIssued,
		fmt.Sprintf("site %s's certificate issued into Secret %s/%s (%s); valid until %s", site, ref.Namespace, ref.Name, why, issued.Leaf.NotAfter.UTC().Format(time.RFC3339)))
	out.Condition = Condition{OK: true, Reason: ReasonSiteCertificateIssued, Message: fmt.Sprintf("site %s's certificate issued (%s); valid until %s, renewed at %s",
		site, why, issued.Leaf.NotAfter.UTC().Format(time.RFC3339), renew.UTC().Format(time.RFC3339))}
	return out
}

// gridCA reads the network's CA Secret, generating the grid CA into it
// when it does not exist. A CA Secret that exists is never rewritten. ca is
// nil when the Secret holds the certificate without its key (this site
// cannot issue); cond is set when the CA cannot be used at all.
func (r *Identity) gridCA(ctx context.Context, network *v1alpha1.GridNetwork, ref *v1alpha1.NamespacedName, now time.Time) (ca *sitetrust.CA, cert *x509.Certificate, wrote bool, cond *Condition) {
	at := fmt.Sprintf("spec.tls.caSecretRef (Secret %s/%s)", ref.Namespace, ref.Name)
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	var s corev1.Secret
	err := r.API.Get(ctx, key, &s)
	if apierrors.IsNotFound(err) {
		certPEM, keyPEM, genErr := sitetrust.NewCA(now, sitetrust.CALifetime)
		if genErr != nil {
			return nil, nil, false, &Condition{Reason: ReasonGridCAInvalid, Message: fmt.Sprintf("%s: generating the grid CA failed: %v", at, genErr)}
		}
		// Server-side apply, without forcing: a create the chart can grant
		// by name (a POST cannot be), and, should a CA Secret appear
		// between the read and the write, a conflict on its fields rather
		// than an overwrite. The reconciler runs one network at a time, so
		// this agent never races itself.
		apply := corev1ac.Secret(ref.Name, ref.Namespace).
			WithLabels(map[string]string{envelope.LabelManagedBy: r.Opts.Producer, envelope.LabelNetwork: network.Name}).
			WithType(corev1.SecretTypeTLS).
			WithData(map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, keyCACert: certPEM})
		err = r.Client.Apply(ctx, apply, client.FieldOwner(r.Opts.Producer))
		switch {
		case err == nil:
			wrote = true
			r.Opts.Logger.Info("grid_ca_generated", "network", network.Name, "secret", key.String())
			r.Events.Record(ctx, network, "GridNetwork", corev1.EventTypeNormal, "GridCAGenerated",
				fmt.Sprintf("the grid CA was generated into Secret %s: give the same Secret to every other site of the grid", key))
			err = r.API.Get(ctx, key, &s)
		case apierrors.IsConflict(err):
			err = r.API.Get(ctx, key, &s)
		default:
			r.Opts.Logger.Error("grid_ca_not_written", "network", network.Name, "secret", key.String(), "error", err.Error())
			return nil, nil, false, &Condition{Reason: ReasonGridCAGenerationFailed, Message: fmt.Sprintf("%s: the Secret does not exist and %s", at, base.APIFailure(err, "write", "Secret"))}
		}
	}
	if err != nil {
		return nil, nil, wrote, &Condition{Reason: ReasonGridCAUnreadable, Message: fmt.Sprintf("%s: %s", at, base.APIFailure(err, "get", "Secret"))}
	}
	certPEM := s.Data[corev1.TLSCertKey]
	if len(certPEM) == 0 {
		certPEM = s.Data[keyCACert]
	}
	if len(s.Data[corev1.TLSPrivateKeyKey]) == 0 {
		certs, perr := sitetrust.ParseCertificates(certPEM)
		if perr != nil {
			return nil, nil, wrote, &Condition{Reason: ReasonGridCAInvalid, Message: fmt.Sprintf("%s: %v", at, perr)}
		}
		return nil, certs[0], wrote, nil
	}
	ca, err = sitetrust.ParseCA(certPEM, s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, nil, wrote, &Condition{Reason: ReasonGridCAInvalid, Message: fmt.Sprintf("%s: %v", at, err)}
	}
	if now.After(ca.Cert.NotAfter) {
		return nil, nil, wrote, &Condition{Reason: ReasonGridCAInvalid, Message: fmt.Sprintf("%s: the grid CA expired at %s", at, ca.Cert.NotAfter.UTC().Format(time.RFC3339))}
	}
	return ca, ca.Cert, wrote, nil
}

// gossipable is a site Secret's tls.crt as gossiped: refused, never
// passed on, when it holds a private key.
func gossipable(at string, certPEM []byte) (string, error) {
	if strings.Contains(string(certPEM), "PRIVATE KEY") {
		return "", fmt.Errorf("%s: tls.crt holds a private key; no certificate is gossiped", at)
	}
	return string(certPEM), nil
}

// networkExists reports whether a GridNetwork exists (from the cache; an
// error counts as existing, so nothing is taken over on doubt).
func (r *Identity) networkExists(ctx context.Context, name string) bool {
	var n v1alpha1.GridNetwork
	return !apierrors.IsNotFound(r.Client.Get(ctx, types.NamespacedName{Name: name}, &n))
}

// reissueWhy says why this site's certificate is issued (or obtained)
// again: the Secret is missing or unreadable, or sitetrust.ReissueReason;
// "" keeps it.
func reissueWhy(exists bool, held *sitetrust.Held, heldErr error, caCert *x509.Certificate, site string, now time.Time) string {
	switch {
	case !exists:
		return "the Secret does not exist"
	case heldErr != nil:
		return heldErr.Error()
	}
	return sitetrust.ReissueReason(held, caCert, site, now)
}

// writeSiteSecret writes the site certificate (chain), its key and the
// grid CA into the site Secret by server-side apply. A type is immutable,
// and one left out of an apply that wrote it would be removed: a new
// Secret is kubernetes.io/tls, one that exists keeps its own.
func (r *Identity) writeSiteSecret(ctx context.Context, network *v1alpha1.GridNetwork, exists bool, current *corev1.Secret, chain, key []byte, roots []*x509.Certificate) error {
	apply := r.siteSecretApply(network, map[string][]byte{corev1.TLSCertKey: chain, corev1.TLSPrivateKeyKey: key, keyCACert: encodeCertificates(roots)})
	if exists {
		apply.WithType(current.Type)
	} else {
		apply.WithType(corev1.SecretTypeTLS)
	}
	// A data key the agent wrote before and leaves out here (a pending
	// key) goes: the agent's field manager owns it alone.
	return r.Client.Apply(ctx, apply, client.FieldOwner(r.Opts.Producer), client.ForceOwnership)
}

// keepPendingKey adds the key a request asks to be certified to the
// existing site Secret, leaving its certificate, key and CA as they are:
// applied with them (a data key the agent wrote and leaves out would go)
// and on the version read, so that a write made since is not undone.
func (r *Identity) keepPendingKey(ctx context.Context, network *v1alpha1.GridNetwork, current *corev1.Secret, keyPEM []byte) error {
	data := map[string][]byte{keyPendingData: keyPEM}
	for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, keyCACert} {
		if v, ok := current.Data[k]; ok {
			data[k] = v
		}
	}
	apply := r.siteSecretApply(network, data).WithType(current.Type).WithResourceVersion(current.ResourceVersion)
	return r.Client.Apply(ctx, apply, client.FieldOwner(r.Opts.Producer), client.ForceOwnership)
}

// siteSecretApply is the site Secret the agent applies, with data.
func (r *Identity) siteSecretApply(network *v1alpha1.GridNetwork, data map[string][]byte) *corev1ac.SecretApplyConfiguration {
	ref := network.Spec.TLS.SiteSecretRef
	return corev1ac.Secret(ref.Name, ref.Namespace).
		WithLabels(map[string]string{envelope.LabelManagedBy: r.Opts.Producer, envelope.LabelNetwork: network.Name}).
		WithData(data)
}

// encodeCertificates are certificates, PEM, one after another.
func encodeCertificates(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, sitetrust.EncodeCertificate(c)...)
	}
	return out
}

// validUnder reports whether the held certificate is a site certificate
// of site under one of the CAs the network trusts.
func validUnder(held *sitetrust.Held, roots []*x509.Certificate, site string) bool {
	return slices.ContainsFunc(roots, func(ca *x509.Certificate) bool {
		return sitetrust.ReissueReason(held, ca, site, held.Leaf.NotBefore.Add(time.Second)) == ""
	})
}

// issuingCA is the CA the network's issuer issues from, when its trust
// bundle names one the network trusts (a rotation under way), else
// configured.
func issuingCA(configured *x509.Certificate, roots []*x509.Certificate, b *bundle.Bundle) *x509.Certificate {
	if b == nil || b.Issuing == "" {
		return configured
	}
	for _, c := range roots {
		if sitetrust.Fingerprint(c.Raw) == b.Issuing {
			return c
		}
	}
	return configured
}

// keepSiteCAs writes the CAs the network trusts into the site Secret's
// ca.crt when they changed (a rotation of the grid CA) and its
// certificate did not: the gateway and the listener read them there. It
// is written with the certificate and key as they are, on the version
// read.
func (r *Identity) keepSiteCAs(ctx context.Context, network *v1alpha1.GridNetwork, secret *corev1.Secret, roots []*x509.Certificate, out *IdentityOutcome) {
	want := encodeCertificates(roots)
	if len(roots) == 0 || bytes.Equal(secret.Data[keyCACert], want) || secret.Labels[envelope.LabelManagedBy] != r.Opts.Producer {
		return
	}
	data := map[string][]byte{keyCACert: want}
	for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, keyPendingData} {
		if v, ok := secret.Data[k]; ok {
			data[k] = v
		}
	}
	apply := r.siteSecretApply(network, data).WithType(secret.Type).WithResourceVersion(secret.ResourceVersion)
	if err := r.Client.Apply(ctx, apply, client.FieldOwner(r.Opts.Producer), client.ForceOwnership); err != nil {
		r.Opts.Logger.Warn("site_ca_not_written", "network", network.Name, "error", err.Error())
		return
	}
	out.Wrote = true
	r.Opts.Logger.Info("site_ca_written", "network", network.Name, "roots", len(roots))
}
