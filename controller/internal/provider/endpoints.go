package provider

import (
	"context"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/trust/endpointtls"
)

// The kinds of request a provider's endpoint settings apply to: each has
// its own client (connections, TLS sessions) and its own status reasons
// (providerpolicy.HealthCheckReason, MetricsReason).
const (
	FeatureHealthCheck = "HealthCheck"
	FeatureMetrics     = "Metrics"
)

// Endpoints are the providers' endpoint settings as the prober's clients
// use them: TLS material read from the API server, and the scraper
// ServiceAccount's tokens.
type Endpoints struct {
	env    *base.Env
	tokens *scraperTokens
}

// NewEndpoints reads material and tokens for env's reconcilers; scraper is
// the ServiceAccount whose tokens are sent where a provider asks for one.
func NewEndpoints(env *base.Env, scraper types.NamespacedName) *Endpoints {
	return &Endpoints{env: env, tokens: &scraperTokens{writer: env.Client, account: scraper, now: env.Opts.Now}}
}

// EndpointFor is the provider's TLS and credential for one feature: the
// feature's own tls (healthCheck.tls, metricsConfig.tls) or else
// spec.tls, and the feature's auth. Nil when neither is set: HTTPS is
// then verified against the prober's roots, as before. src reads the
// material at each request.
func (e *Endpoints) EndpointFor(p *v1alpha1.InferenceProvider, feature string, own *v1alpha1.EndpointTLSConfig,
	auth *v1alpha1.EndpointAuth, src func(context.Context) endpointtls.Source) *probe.Endpoint {
	cfg := own
	if cfg == nil {
		cfg = p.Spec.TLS
	}
	if cfg == nil && auth == nil {
		return nil
	}
	out := &probe.Endpoint{Key: EndpointKey(feature, p.Name)}
	if cfg != nil {
		cfg = cfg.DeepCopy()
		out.TLS = func(ctx context.Context) (*endpointtls.Raw, error) { return endpointtls.Read(ctx, cfg, src(ctx)) }
	}
	if auth != nil {
		out.Token = e.tokens.token
		out.AllowPlaintext = auth.AllowPlaintext
	}
	return out
}

// EndpointKey names a provider's client for one feature among the
// prober's clients.
func EndpointKey(feature, provider string) string { return feature + "/" + provider }

// MaterialReader reads TLS material for endpointtls with gets straight
// from the API server, in the namespaces the agent works in only, each
// object once per reader: a scrape round's reader is shared by its
// providers, which often name the same CA. The Secrets of the site's own
// identity (every GridNetwork's grid CA, site certificate and SWIM key)
// are never read for a provider: whoever writes an InferenceProvider
// could otherwise have the agent present its site certificate to any
// endpoint, a remote site's gateway among them, and act as its site there.
type MaterialReader struct {
	api      client.Reader
	allowed  func(namespace string) bool
	identity map[types.NamespacedName]bool

	mu   sync.Mutex
	memo map[string]*materialRead
}

type materialRead struct {
	once  sync.Once
	data  map[string][]byte
	found bool
	err   error
}

// NewMaterialReader is a reader of TLS material for one probe or one
// scrape round.
func (e *Endpoints) NewMaterialReader(ctx context.Context) *MaterialReader {
	r := &MaterialReader{api: e.env.API, allowed: e.env.Opts.Watches, memo: map[string]*materialRead{}, identity: map[types.NamespacedName]bool{}}
	var networks v1alpha1.GridNetworkList
	if err := e.env.Client.List(ctx, &networks); err != nil {
		// The site's identity unknown, no Secret is read this time.
		r.allowed = func(string) bool { return false }
		return r
	}
	for i := range networks.Items {
		t := networks.Items[i].Spec.TLS
		if t == nil {
			continue
		}
		for _, ref := range []*v1alpha1.NamespacedName{t.CASecretRef, t.SiteSecretRef} {
			if ref != nil {
				r.identity[types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}] = true
			}
		}
		for _, ref := range []*v1alpha1.NamespacedKeyRef{t.SwimKeySecretRef, t.SwimKeyRef} {
			if ref != nil {
				r.identity[types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}] = true
			}
		}
	}
	return r
}

func (r *MaterialReader) Secret(ctx context.Context, namespace, name string) (map[string][]byte, bool, error) {
	if r.identity[types.NamespacedName{Namespace: namespace, Name: name}] {
		return nil, false, fmt.Errorf("%w: it holds the site's own identity (a GridNetwork's spec.tls names it), which is never presented to a provider", endpointtls.ErrForbidden)
	}
	return r.read("Secret", namespace, name, func(key types.NamespacedName) (map[string][]byte, error) {
		var s corev1.Secret
		err := r.api.Get(ctx, key, &s)
		return s.Data, err
	})
}

func (r *MaterialReader) ConfigMap(ctx context.Context, namespace, name string) (map[string][]byte, bool, error) {
	return r.read("ConfigMap", namespace, name, func(key types.NamespacedName) (map[string][]byte, error) {
		var cm corev1.ConfigMap
		if err := r.api.Get(ctx, key, &cm); err != nil {
			return nil, err
		}
		data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
		for k, v := range cm.BinaryData {
			data[k] = v
		}
		for k, v := range cm.Data {
			data[k] = []byte(v)
		}
		return data, nil
	})
}

func (r *MaterialReader) read(kind, namespace, name string,
	get func(types.NamespacedName) (map[string][]byte, error)) (map[string][]byte, bool, error) {
	if r.allowed != nil && !r.allowed(namespace) {
		return nil, false, fmt.Errorf("%w: its namespace is not one the agent works in", endpointtls.ErrForbidden)
	}
	r.mu.Lock()
	m, ok := r.memo[kind+"/"+namespace+"/"+name]
	if !ok {
		m = &materialRead{}
		r.memo[kind+"/"+namespace+"/"+name] = m
	}
	r.mu.Unlock()
	m.once.Do(func() {
		data, err := get(types.NamespacedName{Namespace: namespace, Name: name})
		switch {
		case apierrors.IsNotFound(err):
		case apierrors.IsForbidden(err):
			m.err = fmt.Errorf("%w: refused by RBAC", endpointtls.ErrForbidden)
		case err != nil:
			m.err = err
		default:
			m.data, m.found = data, true
		}
	})
	return m.data, m.found, m.err
}

// scraperTokenLifetime is what the agent asks of a scraper token; the API
// server's minimum. It is renewed at four fifths.
const scraperTokenLifetime = 10 * time.Minute

// scraperTokens requests short-lived tokens of the scraper ServiceAccount
// (the agent chart's, granted only get on /metrics) with the TokenRequest
// API, and keeps the current one until four fifths of its life: one
// request per eight minutes, whatever the number of providers. A token is
// never logged, evented or put in a status.
type scraperTokens struct {
	writer  client.Client
	account types.NamespacedName
	now     func() time.Time

	mu      sync.Mutex
	current string
	renewAt time.Time
}

func (s *scraperTokens) token(ctx context.Context) (string, error) {
	if s.account.Name == "" {
		return "", fmt.Errorf("the agent has no scraper ServiceAccount (the agent chart's metricsScraper, the --scraper-service-account flag)")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.current != "" && now.Before(s.renewAt) {
		return s.current, nil
	}
	seconds := int64(scraperTokenLifetime / time.Second)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: s.account.Namespace, Name: s.account.Name}}
	if err := s.writer.SubResource("token").Create(ctx, sa, req); err != nil {
		// The reason alone: an API error's text is the server's words.
		why := string(apierrors.ReasonForError(err))
		if why == "" {
			why = "no answer"
		}
		return "", fmt.Errorf("a token of the scraper ServiceAccount %s could not be requested (%s)", s.account, why)
	}
	if req.Status.Token == "" {
		return "", fmt.Errorf("the API server answered the token request for %s without a token", s.account)
	}
	life := req.Status.ExpirationTimestamp.Sub(now)
	if life <= 0 || life > scraperTokenLifetime {
		life = scraperTokenLifetime
	}
	s.current, s.renewAt = req.Status.Token, now.Add(life*4/5)
	return s.current, nil
}
