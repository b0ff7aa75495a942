// Package providerpolicy decides an InferenceProvider's phase from what
// the controller knows of it: whether this site hosts it, its credential
// Secret, its access policy and its health probes, as one ordered chain of
// checks (Assess); and it names every reason the provider's status can
// carry (Reasons), the conditions' too. It is pure; the reconcilers feed it
// and act on the verdict. Only a Secret's shape (which keys exist, whether
// each value is usable) is ever looked at here, never its bytes.
// README.md is the table of phases and reasons users read.
package providerpolicy

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/render"
	"github.com/gridsync/gridsync/shared/envelope"
)

// The health rule: a provider whose probe has failed DegradedAfter times
// in a row is Degraded (still routed to, its candidates not fresh);
// UnavailableAfter failures in a row make it Unavailable (left out of every
// overlay). One success makes it Available again. A provider not probed
// yet counts as healthy, so that an agent restart does not withdraw routes
// until the first probes return.
const (
	DegradedAfter    = 1
	UnavailableAfter = 3
)

// SecretShape is what the controller keeps of a Secret: for every key,
// whether its value is a usable token (non-empty, valid UTF-8).
type SecretShape map[string]bool

// Secrets finds the shape of a Secret; found is false when it does not
// exist.
type Secrets interface {
	SecretShape(namespace, name string) (shape SecretShape, found bool, err error)
}

// Health is what the prober knows of a provider.
type Health struct {
	// Probed is false until a probe has completed.
	Probed              bool
	ConsecutiveFailures int
	// LastError is the last failure's outcome: a word from a closed set,
	// never what the server answered.
	LastError string
	// TokenWithheld: the provider's credential exists but was not sent
	// in probes (its Secret does not match the probe Secret selector).
	TokenWithheld bool
	// LastProbeAt and LastLatency are the last probe's start and how long
	// it took (the site's signals serve them).
	LastProbeAt time.Time
	LastLatency time.Duration
	// Refusal, when set, is why the health check is not sent (its TLS
	// or credential cannot be used; RefusalMessage says how): the
	// provider is Degraded with the health check's reason for it.
	Refusal        Refusal
	RefusalMessage string
}

// withheldNote is added to a probed provider's message while its token is
// withheld from probes.
const withheldNote = "; probes carry no token: its Secret does not match the agent's probe Secret selector"

// Verdict is a provider's phase and what rendering needs of it.
type Verdict struct {
	Phase   v1alpha1.ProviderPhase
	Reason  string
	Message string
	// Provider is the provider as rendering sees it.
	Provider render.Provider
}

// Options hold what the verdict depends on beyond the provider.
type Options struct {
	Secrets Secrets
	// SecretNamespaceWatched says whether the controller may read Secrets
	// in a namespace; a reference elsewhere cannot be verified.
	SecretNamespaceWatched func(namespace string) bool
	Health                 Health
	// Elsewhere, when set, says why the provider's siteSelector does not
	// select this site: the chain's first check decides Pending, and
	// nothing else is looked at (Secrets may be nil).
	Elsewhere string
}

// check is one link of the chain: it decides the verdict (done) or lets
// the next one look.
type check func(p *v1alpha1.InferenceProvider, opts Options, v *Verdict) (done bool, err error)

// chain is the order of the checks; the first that decides wins. Reasons
// and README.md follow it.
var chain = []check{
	checkHosted,     // SiteNotSelected
	checkCredential, // UnsupportedAuthStrategy ... CredentialSecretValueInvalid
	checkAccessPolicy,
	checkHealthCheckSent, // HealthCheckTls..., HealthCheckAuth..., HealthCheckPlaintextRefused
	checkHealth,          // HealthCheckFailing, HealthCheckFailed
}

// Assess decides the provider's phase: the checks of the chain in order,
// the first failure decides; a provider that passes them all is Available
// (Ready).
func Assess(p *v1alpha1.InferenceProvider, opts Options) (Verdict, error) {
	v := Verdict{Provider: render.Provider{
		Name:    p.Name,
		Cluster: p.Spec.ClusterName,
		Models:  make([]string, 0, len(p.Spec.Models)),
	}}
	if v.Provider.Cluster == "" {
		v.Provider.Cluster = p.Name
	}
	for _, m := range p.Spec.Models {
		v.Provider.Models = append(v.Provider.Models, m.Name)
	}
	for _, c := range chain {
		done, err := c(p, opts, &v)
		if err != nil {
			return Verdict{}, err
		}
		if done {
			return v, nil
		}
	}
	note := ""
	if p.Spec.HealthCheck != nil && opts.Health.Probed && opts.Health.TokenWithheld {
		note = withheldNote
	}
	return v.with(v1alpha1.ProviderAvailable, ReasonReady, "routed to by every admitted gateway"+note), nil
}

// checkHosted: a provider another site hosts is neither probed, scraped
// nor routed here.
func checkHosted(_ *v1alpha1.InferenceProvider, opts Options, v *Verdict) (bool, error) {
	if opts.Elsewhere == "" {
		return false, nil
	}
	*v = v.with(v1alpha1.ProviderPending, ReasonSiteNotSelected, opts.Elsewhere)
	return true, nil
}

// checkCredential: a bearer-token reference must name a usable value.
func checkCredential(p *v1alpha1.InferenceProvider, opts Options, v *Verdict) (bool, error) {
	credential, reason, message, err := credentialOf(p.Spec.Auth, opts)
	if err != nil {
		return false, err
	}
	if reason != "" {
		*v = v.with(v1alpha1.ProviderUnavailable, reason, message)
		return true, nil
	}
	v.Provider.Credential = credential
	return false, nil
}

// checkAccessPolicy: the sites the provider admits must parse.
func checkAccessPolicy(p *v1alpha1.InferenceProvider, _ Options, v *Verdict) (bool, error) {
	policy := p.Spec.AccessPolicy
	if policy == nil || policy.SiteSelector == nil {
		return false, nil
	}
	sites, err := metav1.LabelSelectorAsSelector(policy.SiteSelector)
	if err != nil {
		*v = v.with(v1alpha1.ProviderUnavailable, ReasonAccessPolicyInvalid, fmt.Sprintf("accessPolicy.siteSelector: %v", err))
		return true, nil
	}
	v.Provider.Sites = sites
	return false, nil
}

// checkHealthCheckSent: a health check that cannot be sent (its TLS or
// credential cannot be used) degrades the provider, whatever the probes
// found before.
func checkHealthCheckSent(p *v1alpha1.InferenceProvider, opts Options, v *Verdict) (bool, error) {
	if p.Spec.HealthCheck == nil || opts.Health.Refusal == "" {
		return false, nil
	}
	*v = v.with(v1alpha1.ProviderDegraded, HealthCheckReason(opts.Health.Refusal),
		"the health check is not sent: "+opts.Health.RefusalMessage)
	return true, nil
}

// checkHealth: the health rule (DegradedAfter, UnavailableAfter).
func checkHealth(p *v1alpha1.InferenceProvider, opts Options, v *Verdict) (bool, error) {
	if p.Spec.HealthCheck == nil || !opts.Health.Probed {
		return false, nil
	}
	note := ""
	if opts.Health.TokenWithheld {
		note = withheldNote
	}
	switch failures := opts.Health.ConsecutiveFailures; {
	case failures >= UnavailableAfter:
		*v = v.with(v1alpha1.ProviderUnavailable, ReasonHealthCheckFailed,
			fmt.Sprintf("health check failed %d times in a row: %s%s", failures, opts.Health.LastError, note))
		return true, nil
	case failures >= DegradedAfter:
		*v = v.with(v1alpha1.ProviderDegraded, ReasonHealthCheckFailing,
			fmt.Sprintf("health check failed %d times in a row: %s%s", failures, opts.Health.LastError, note))
		return true, nil
	}
	return false, nil
}

func (v Verdict) with(phase v1alpha1.ProviderPhase, reason, message string) Verdict {
	v.Phase, v.Reason, v.Message = phase, reason, message
	v.Provider.Phase = phase
	return v
}

// credentialOf verifies a bearer-token reference. It returns the
// reference the candidates carry, or the reason it cannot be used.
func credentialOf(auth *v1alpha1.ProviderAuth, opts Options) (*envelope.Credential, string, string, error) {
	if auth == nil {
		return nil, "", "", nil
	}
	if auth.CredentialsManagedExternally {
		// Authentication is managed outside Grid: the Secret is not read,
		// the candidates carry no credential, probes send no token.
		return nil, "", "", nil
	}
	if auth.Strategy != v1alpha1.AuthStrategyBearerToken {
		return nil, ReasonUnsupportedAuthStrategy, fmt.Sprintf("auth.strategy %q is not supported (only %s)", auth.Strategy, v1alpha1.AuthStrategyBearerToken), nil
	}
	ref := auth.SecretRef
	if ref == nil || ref.Name == "" || ref.Namespace == "" || ref.Key == "" {
		return nil, ReasonCredentialSecretRefInvalid, "auth.secretRef needs name, namespace and key", nil
	}
	credential := &envelope.Credential{
		Strategy:  v1alpha1.AuthStrategyBearerToken,
		SecretRef: envelope.SecretRef{Name: ref.Name, Namespace: ref.Namespace, Key: ref.Key},
	}
	where := ref.Namespace + "/" + ref.Name
	if opts.SecretNamespaceWatched != nil && !opts.SecretNamespaceWatched(ref.Namespace) {
		return nil, ReasonCredentialSecretRefInvalid,
			fmt.Sprintf("Secret %s is in a namespace the agent does not watch; add it to the agent's namespaces or set credentialsManagedExternally", where), nil
	}
	shape, found, err := opts.Secrets.SecretShape(ref.Namespace, ref.Name)
	switch {
	case err != nil:
		return nil, "", "", fmt.Errorf("read Secret %s: %w", where, err)
	case !found:
		return nil, ReasonCredentialSecretMissing, fmt.Sprintf("Secret %s does not exist", where), nil
	}
	usable, ok := shape[ref.Key]
	switch {
	case !ok:
		return nil, ReasonCredentialSecretKeyMissing, fmt.Sprintf("Secret %s has no key %q", where, ref.Key), nil
	case !usable:
		return nil, ReasonCredentialSecretValueInvalid, fmt.Sprintf("Secret %s key %q is empty or not valid UTF-8", where, ref.Key), nil
	}
	return credential, "", "", nil
}
