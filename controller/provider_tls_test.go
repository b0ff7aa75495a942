package controller_test

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/signals"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testpki"
)

// providerServer is an inference provider's HTTPS (or HTTP) endpoint on
// loopback: /health and /metrics. Its certificate can be swapped; it may
// require a client certificate of one CA, and a bearer token that the real
// API server authenticates (TokenReview) and authorises for get on
// /metrics (SubjectAccessReview), as kube-rbac-proxy does.
type providerServer struct {
	*httptest.Server
	cert       atomic.Pointer[tls.Certificate]
	ticketKey  atomic.Pointer[[32]byte]
	requests   atomic.Int64
	mu         sync.Mutex
	clientCNs  map[string]int
	tokensSeen map[string]bool
}

type serverOpts struct {
	plaintext bool
	clientCA  *x509.CertPool // require a client certificate of it
	// tokenReviewer, when set, is the API server that must authenticate
	// and authorise each request's bearer token.
	tokenReviewer *controlplane.ControlPlane
}

func startProviderServer(t *testing.T, certPEM, keyPEM []byte, o serverOpts) *providerServer {
	t.Helper()
	s := &providerServer{clientCNs: map[string]int{}, tokensSeen: map[string]bool{}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve(t, o.tokenReviewer)))
	if o.plaintext {
		s.Start()
		t.Cleanup(s.Close)
		return s
	}
	s.setCertificate(t, certPEM, keyPEM)
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.clientCA != nil {
		base.ClientAuth, base.ClientCAs = tls.RequireAndVerifyClientCert, o.clientCA
	}
	s.TLS = &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Each handshake with the current certificate: a swap reaches
		// the next connection.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := base.Clone()
			c.Certificates = []tls.Certificate{*s.cert.Load()}
			c.SetSessionTicketKeys([][32]byte{*s.ticketKey.Load()})
			return c, nil
		},
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *providerServer) setCertificate(t *testing.T, certPEM, keyPEM []byte) {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	// New session ticket keys with it, as a restarted server has: the
	// sessions of the previous certificate are not resumed.
	var key [32]byte
	_, err = rand.Read(key[:])
	require.NoError(t, err)
	s.ticketKey.Store(&key)
	s.cert.Store(&pair)
}

func (s *providerServer) serve(t *testing.T, reviewer *controlplane.ControlPlane) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			s.mu.Lock()
			s.clientCNs[r.TLS.PeerCertificates[0].Subject.CommonName]++
			s.mu.Unlock()
		}
		if reviewer != nil {
			token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || !tokenMayGetMetrics(t, reviewer, token) {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			s.mu.Lock()
			s.tokensSeen[token] = true
			s.mu.Unlock()
		}
		if r.URL.Path == "/metrics" {
			_, _ = w.Write([]byte(providerMetrics))
			return
		}
		w.WriteHeader(http.StatusOK)
	}
}

// tokenMayGetMetrics asks the real API server who the token is and
// whether that user may get /metrics.
func tokenMayGetMetrics(t *testing.T, cp *controlplane.ControlPlane, token string) bool {
	admin := cp.AdminClient()
	review, err := admin.AuthenticationV1().TokenReviews().Create(t.Context(),
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Authenticated {
		return false
	}
	sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: review.Status.User.Username, Groups: review.Status.User.Groups,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}},
	}, metav1.CreateOptions{})
	return err == nil && sar.Status.Allowed
}

func (s *providerServer) clients() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.clientCNs {
		out[k] = v
	}
	return out
}

func (s *providerServer) tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for tok := range s.tokensSeen {
		out = append(out, tok)
	}
	return out
}

// tlsProvider is a provider whose health check and metrics both go to
// srv, with the given trust and credentials.
func (e *env) tlsProvider(name, network string, srv *providerServer, tlsCfg *v1alpha1.EndpointTLSConfig) *v1alpha1.InferenceProvider {
	p := e.provider(name, network, "m1")
	p.Spec.TLS = tlsCfg
	p.Spec.HealthCheck = &v1alpha1.HealthCheck{Endpoint: srv.URL, Path: "/health", Interval: "5s", Timeout: "2s"}
	p.Spec.MetricsConfig = &v1alpha1.MetricsConfig{MetricsEndpoint: srv.URL, Timeout: "1s",
		SignalNames: v1alpha1.MetricSignalNames{QueueDepth: "vllm:num_requests_waiting"}}
	return p
}

func (e *env) keyRef(name, key string) *v1alpha1.NamespacedKeyRef {
	return &v1alpha1.NamespacedKeyRef{Namespace: e.credNS, Name: name, Key: key}
}

func (e *env) clientCert(name string) *v1alpha1.ClientCertificateSecretRef {
	return &v1alpha1.ClientCertificateSecretRef{Namespace: e.credNS, Name: name}
}

// providerPKI is a provider CA with a server certificate for 127.0.0.1,
// and a client CA with the agent's certificate and a stranger's.
type providerPKI struct {
	ca, clientCA                *testpki.Issuer
	serverCert, serverKey       []byte
	agentCert, agentKey         []byte
	strangerCert, strangerKey   []byte
	otherCA                     *testpki.Issuer
	otherCert, otherKey         []byte // a client certificate of another CA
	otherNameCert, otherNameKey []byte // a server certificate for provider.internal only
}

func newProviderPKI(t *testing.T) providerPKI {
	p := providerPKI{ca: testpki.NewRoot(t, "provider-ca"), clientCA: testpki.NewRoot(t, "client-ca"), otherCA: testpki.NewRoot(t, "other-ca")}
	p.serverCert, p.serverKey = p.ca.Leaf(t, "provider", testpki.Opts{})
	p.agentCert, p.agentKey = p.clientCA.Leaf(t, "agent", testpki.Opts{ClientOnly: true})
	p.strangerCert, p.strangerKey = p.clientCA.Leaf(t, "stranger", testpki.Opts{ClientOnly: true})
	p.otherCert, p.otherKey = p.otherCA.Leaf(t, "agent-of-another-ca", testpki.Opts{ClientOnly: true})
	p.otherNameCert, p.otherNameKey = p.ca.Leaf(t, "provider", testpki.Opts{Names: []string{"provider.internal"}})
	return p
}

func (p providerPKI) clientPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.clientCA.Cert)
	return pool
}

// A provider behind a private CA is health-checked and scraped with that
// CA only, its Secret's or its ConfigMap's, presenting the configured
// client certificate; without it, or with another, the server refuses
// and the provider is neither healthy nor scraped. Nothing is trusted from
// the system's roots.
func TestProvidersBehindAPrivateCAAreCheckedWithItsTrustOnly(t *testing.T) {
	e := newEnv(t)
	pki := newProviderPKI(t)
	srv := startProviderServer(t, pki.serverCert, pki.serverKey, serverOpts{clientCA: pki.clientPool()})
	e.create(e.secret("provider-ca", map[string][]byte{"ca.crt": pki.ca.PEM}))
	e.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.credNS, Name: "provider-ca-bundle"}, Data: map[string]string{"bundle.pem": string(pki.ca.PEM)}})
	e.create(e.secret("agent-client", map[string][]byte{"tls.crt": pki.agentCert, "tls.key": pki.agentKey}))
	e.create(e.secret("other-client", map[string][]byte{"cert.pem": pki.otherCert, "key.pem": pki.otherKey}))
	network := e.network(e.gateway("edge", "east"))
	e.create(network)

	mutual := e.tlsProvider("mutual", network.Name, srv, &v1alpha1.EndpointTLSConfig{CASecretRef: e.keyRef("provider-ca", ""), ClientCertificateSecretRef: e.clientCert("agent-client")})
	perFeature := e.tlsProvider("per-feature", network.Name, srv, nil)
	byConfigMap := &v1alpha1.EndpointTLSConfig{CAConfigMapRef: e.keyRef("provider-ca-bundle", "bundle.pem"), ClientCertificateSecretRef: e.clientCert("agent-client")}
	perFeature.Spec.HealthCheck.TLS, perFeature.Spec.MetricsConfig.TLS = byConfigMap, byConfigMap
	anonymous := e.tlsProvider("anonymous", network.Name, srv, &v1alpha1.EndpointTLSConfig{CASecretRef: e.keyRef("provider-ca", "")})
	other := e.tlsProvider("other-identity", network.Name, srv, &v1alpha1.EndpointTLSConfig{CASecretRef: e.keyRef("provider-ca", ""),
		ClientCertificateSecretRef: &v1alpha1.ClientCertificateSecretRef{Namespace: e.credNS, Name: "other-client", CertificateKey: "cert.pem", PrivateKeyKey: "key.pem"}})
	systemRoots := e.tlsProvider("system-roots", network.Name, srv, nil)
	for _, p := range []*v1alpha1.InferenceProvider{mutual, perFeature, anonymous, other, systemRoots} {
		e.create(p)
	}
	store := signals.NewStore(nil)
	reg := prometheus.NewRegistry()
	e.startAgent(withSignals(store), withLoopbackScrapes(64<<10), func(o *controller.ManagerOptions) { o.Registerer = reg })

	for _, p := range []*v1alpha1.InferenceProvider{mutual, perFeature} {
		e.providerPhase(p, v1alpha1.ProviderAvailable, "Ready")
		e.scraped(p, metav1.ConditionTrue, controller.ReasonScraped)
		e.eventually(p.Name+"'s signals", func() (bool, string) {
			out := rendered(store)
			return strings.Contains(out, `vllm:num_requests_waiting{grid_provider="`+p.Name+`"`), out
		})
	}
	for _, p := range []*v1alpha1.InferenceProvider{anonymous, other, systemRoots} {
		e.providerPhase(p, v1alpha1.ProviderDegraded, "HealthCheckFailing")
		e.scraped(p, metav1.ConditionFalse, controller.ReasonScrapeFailed)
	}
	assert.Equal(t, []string{"agent"}, keys(srv.clients()), "every request the server answered carried the configured identity")
	assert.NotContains(t, rendered(store), `grid_provider="`+anonymous.Name+`",grid_site="east",name=`)
	// The same outcomes, per provider, for the chart's scrape alert.
	scrapedNow := map[string]float64{}
	for _, m := range gathered(t, reg, "gridsync_signals_provider_scraped") {
		scrapedNow[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	assert.Equal(t, map[string]float64{mutual.Name: 1, perFeature.Name: 1, anonymous.Name: 0, other.Name: 0, systemRoots.Name: 0}, scrapedNow)
	e.assertNothingSecretIn(pki.agentKey, pki.otherKey)
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Material that cannot be used is never sent with: each of the eight
// reasons, from real material, makes the provider Degraded (health check)
// and unscraped (metrics) with its name, and the server sees no request.
// A server certificate for another name fails the handshake unless
// serverName names it; TLS to an http:// endpoint is refused outright.
func TestTLSMaterialThatCannotBeUsedIsNeverSent(t *testing.T) {
	e := newEnv(t)
	pki := newProviderPKI(t)
	srv := startProviderServer(t, pki.serverCert, pki.serverKey, serverOpts{clientCA: pki.clientPool()})
	otherName := startProviderServer(t, pki.otherNameCert, pki.otherNameKey, serverOpts{})
	plain := startProviderServer(t, nil, nil, serverOpts{plaintext: true})
	e.create(e.secret("provider-ca", map[string][]byte{"ca.crt": pki.ca.PEM}))
	e.create(e.secret("garbage-ca", map[string][]byte{"ca.crt": []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")}))
	e.create(e.secret("crossed-client", map[string][]byte{"tls.crt": pki.agentCert, "tls.key": pki.strangerKey}))
	network := e.network(e.gateway("edge", "east"))
	e.create(network)

	broken := map[string]*v1alpha1.EndpointTLSConfig{
		"TlsSecretMissing":    {CASecretRef: e.keyRef("absent-ca", "")},
		"TlsKeyMissing":       {CASecretRef: e.keyRef("provider-ca", "bundle.pem")},
		"TlsMaterialInvalid":  {CASecretRef: e.keyRef("garbage-ca", "")},
		"TlsIdentityMismatch": {CASecretRef: e.keyRef("provider-ca", ""), ClientCertificateSecretRef: e.clientCert("crossed-client")},
	}
	providers := map[string]*v1alpha1.InferenceProvider{}
	for reason, cfg := range broken {
		p := e.tlsProvider(strings.ToLower(reason), network.Name, srv, cfg)
		e.create(p)
		providers[reason] = p
	}
	wrongName := e.tlsProvider("wrong-name", network.Name, otherName, &v1alpha1.EndpointTLSConfig{CASecretRef: e.keyRef("provider-ca", "")})
	rightName := e.tlsProvider("server-name", network.Name, otherName, &v1alpha1.EndpointTLSConfig{CASecretRef: e.keyRef("provider-ca", ""), ServerName: "provider.internal"})
	plaintext := e.tlsProvider("plaintext", network.Name, plain, &v1alpha1.EndpointTLSConfig{CASecretRef: e.keyRef("provider-ca", "")})
	for _, p := range []*v1alpha1.InferenceProvider{wrongName, rightName, plaintext} {
		e.create(p)
	}
	e.startAgent(withSignals(signals.NewStore(nil)), withLoopbackScrapes(64<<10))

	for reason, p := range providers {
		got := e.providerPhase(p, v1alpha1.ProviderDegraded, "HealthCheck"+reason)
		assert.Contains(t, got.Status.Message, "not sent")
		e.scraped(p, metav1.ConditionFalse, "Metrics"+reason)
	}
	e.providerPhase(wrongName, v1alpha1.ProviderDegraded, "HealthCheckFailing")
	e.scraped(wrongName, metav1.ConditionFalse, controller.ReasonScrapeFailed)
	e.providerPhase(rightName, v1alpha1.ProviderAvailable, "Ready")
	e.scraped(rightName, metav1.ConditionTrue, controller.ReasonScraped)
	e.providerPhase(plaintext, v1alpha1.ProviderDegraded, "HealthCheckPlaintextRefused")
	e.scraped(plaintext, metav1.ConditionFalse, "MetricsPlaintextRefused")

	time.Sleep(600 * time.Millisecond) // three more scrape rounds
	assert.Zero(t, srv.requests.Load(), "no request is sent with material that cannot be used")
	assert.Zero(t, plain.requests.Load(), "nothing is sent in plaintext when TLS is configured")
	e.assertNothingSecretIn(pki.strangerKey)
}

// A rotated CA is used from the next scrape on, without a restart: the
// server moves to a certificate of a new CA (scrapes fail), the Secret is
// given the new CA (scrapes succeed again).
func TestARotatedCAIsPickedUpWithoutARestart(t *testing.T) {
	e := newEnv(t)
	pki := newProviderPKI(t)
	srv := startProviderServer(t, pki.serverCert, pki.serverKey, serverOpts{})
	ca := e.secret("provider-ca", map[string][]byte{"ca.crt": pki.ca.PEM})
	e.create(ca)
	network := e.network(e.gateway("edge", "east"))
	e.create(network)
	p := e.tlsProvider("rotated", network.Name, srv, &v1alpha1.EndpointTLSConfig{CASecretRef: e.keyRef("provider-ca", "")})
	p.Spec.HealthCheck = nil
	e.create(p)
	e.startAgent(withSignals(signals.NewStore(nil)), withLoopbackScrapes(64<<10))
	e.scraped(p, metav1.ConditionTrue, controller.ReasonScraped)

	next := testpki.NewRoot(t, "provider-ca-2")
	cert, key := next.Leaf(t, "provider", testpki.Opts{})
	srv.setCertificate(t, cert, key)
	srv.CloseClientConnections()
	assert.Contains(t, e.scraped(p, metav1.ConditionFalse, controller.ReasonScrapeFailed), "tls_error")

	update(e, ca, func(s *corev1.Secret) { s.Data["ca.crt"] = next.PEM })
	e.scraped(p, metav1.ConditionTrue, controller.ReasonScraped)
}

// A bearer-protected endpoint gets the scraper ServiceAccount's
// short-lived token, which the API server authenticates and authorises for
// get on /metrics: health checks and scrapes succeed with it, fail
// without it; the endpoint refuses no token and a wrong one. A token is
// never sent over http:// unless allowPlaintext.
func TestBearerProtectedEndpointsGetTheScraperToken(t *testing.T) {
	e := newEnv(t)
	pki := newProviderPKI(t)
	scraper := "scraper-" + e.id
	_, err := e.cp.ServiceAccountToken(e.ctx, e.agentNS, scraper, "unused") // creates the account
	require.NoError(t, err)
	require.NoError(t, e.cp.Grant(e.ctx, e.agentNS, scraper, "gridsync-scraper-"+e.id, "", rbac.ScraperRules()))
	require.NoError(t, e.cp.Grant(e.ctx, e.agentNS, "gridsync-agent", "gridsync-agent-scraper-token", e.agentNS, rbac.ScraperTokenRules(scraper)))

	srv := startProviderServer(t, pki.serverCert, pki.serverKey, serverOpts{tokenReviewer: e.cp})
	plain := startProviderServer(t, nil, nil, serverOpts{plaintext: true, tokenReviewer: e.cp})
	e.create(e.secret("provider-ca", map[string][]byte{"ca.crt": pki.ca.PEM}))
	network := e.network(e.gateway("edge", "east"))
	e.create(network)
	trust := &v1alpha1.EndpointTLSConfig{CASecretRef: e.keyRef("provider-ca", "")}
	withToken := e.tlsProvider("with-token", network.Name, srv, trust)
	withToken.Spec.HealthCheck.Auth = &v1alpha1.EndpointAuth{Type: v1alpha1.EndpointAuthServiceAccountToken}
	withToken.Spec.MetricsConfig.Auth = &v1alpha1.EndpointAuth{Type: v1alpha1.EndpointAuthServiceAccountToken}
	withoutToken := e.tlsProvider("without-token", network.Name, srv, trust)
	plainRefused := e.tlsProvider("plain-refused", network.Name, plain, nil)
	plainRefused.Spec.HealthCheck = nil
	plainRefused.Spec.MetricsConfig.Auth = &v1alpha1.EndpointAuth{Type: v1alpha1.EndpointAuthServiceAccountToken}
	plainAllowed := e.tlsProvider("plain-allowed", network.Name, plain, nil)
	plainAllowed.Spec.HealthCheck = nil
	plainAllowed.Spec.MetricsConfig.Auth = &v1alpha1.EndpointAuth{Type: v1alpha1.EndpointAuthServiceAccountToken, AllowPlaintext: true}
	for _, p := range []*v1alpha1.InferenceProvider{withToken, withoutToken, plainRefused, plainAllowed} {
		e.create(p)
	}
	e.startAgent(withSignals(signals.NewStore(nil)), withLoopbackScrapes(64<<10), func(o *controller.ManagerOptions) {
		o.ScraperServiceAccount = types.NamespacedName{Namespace: e.agentNS, Name: scraper}
	})

	e.providerPhase(withToken, v1alpha1.ProviderAvailable, "Ready")
	e.scraped(withToken, metav1.ConditionTrue, controller.ReasonScraped)
	e.providerPhase(withoutToken, v1alpha1.ProviderDegraded, "HealthCheckFailing")
	assert.Contains(t, e.scraped(withoutToken, metav1.ConditionFalse, controller.ReasonScrapeFailed), "unexpected_status")
	e.scraped(plainRefused, metav1.ConditionFalse, "MetricsPlaintextRefused")
	e.scraped(plainAllowed, metav1.ConditionTrue, controller.ReasonScraped)

	// The endpoint's protection is real: no token, or a token it cannot
	// authenticate, is refused.
	httpsClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: poolOf(pki.ca), MinVersion: tls.VersionTLS12}}}
	for _, header := range []string{"", "Bearer not-a-token", "Bearer " + strings.Repeat("x", 40)} {
		req, err := http.NewRequestWithContext(e.ctx, http.MethodGet, srv.URL+"/metrics", http.NoBody)
		require.NoError(t, err)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		resp, err := httpsClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%q", header)
	}
	tokens := append(srv.tokens(), plain.tokens()...)
	require.NotEmpty(t, tokens, "the servers saw the scraper's token")
	secrets := make([][]byte, 0, len(tokens))
	for _, tok := range tokens {
		secrets = append(secrets, []byte(tok))
	}
	e.assertNothingSecretIn(secrets...)
}

// Without a scraper account (or one the agent may not mint tokens for), a
// provider asking for a token is neither scraped nor probed, and says why.
func TestWithoutAScraperAccountTheCredentialIsUnavailable(t *testing.T) {
	e := newEnv(t)
	pki := newProviderPKI(t)
	srv := startProviderServer(t, pki.serverCert, pki.serverKey, serverOpts{tokenReviewer: e.cp})
	e.create(e.secret("provider-ca", map[string][]byte{"ca.crt": pki.ca.PEM}))
	network := e.network(e.gateway("edge", "east"))
	e.create(network)
	p := e.tlsProvider("needs-token", network.Name, srv, &v1alpha1.EndpointTLSConfig{CASecretRef: e.keyRef("provider-ca", "")})
	p.Spec.HealthCheck.Auth = &v1alpha1.EndpointAuth{Type: v1alpha1.EndpointAuthServiceAccountToken}
	p.Spec.MetricsConfig.Auth = &v1alpha1.EndpointAuth{Type: v1alpha1.EndpointAuthServiceAccountToken}
	e.create(p)
	// An account the agent was never granted tokens of.
	e.startAgent(withSignals(signals.NewStore(nil)), withLoopbackScrapes(64<<10), func(o *controller.ManagerOptions) {
		o.ScraperServiceAccount = types.NamespacedName{Namespace: e.agentNS, Name: "not-granted"}
	})
	got := e.providerPhase(p, v1alpha1.ProviderDegraded, "HealthCheckAuthCredentialUnavailable")
	assert.Contains(t, got.Status.Message, "Forbidden")
	e.scraped(p, metav1.ConditionFalse, "MetricsAuthCredentialUnavailable")
	time.Sleep(600 * time.Millisecond)
	assert.Zero(t, srv.requests.Load())
}

func poolOf(ca *testpki.Issuer) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// assertNothingSecretIn checks every place of the test a secret must
// never reach (logs, overlays, statuses, Events) for the bytes of each
// secret (a PEM key's body, a token): none may appear.
func (e *env) assertNothingSecretIn(secrets ...[]byte) {
	e.t.Helper()
	places := e.publicPlaces()
	for _, secret := range secrets {
		needle := secretNeedle(secret)
		for where, text := range places {
			assert.NotContains(e.t, text, needle, "a secret's bytes in the %s", where)
		}
	}
}

// secretNeedle is a distinctive part of a secret: a PEM block's first
// line of base64, or a token's middle.
func secretNeedle(secret []byte) string {
	s := string(secret)
	if _, body, ok := strings.Cut(s, "-----\n"); ok {
		line, _, _ := strings.Cut(body, "\n")
		return line
	}
	if len(s) > 40 {
		return s[len(s)/2-16 : len(s)/2+16]
	}
	panic(fmt.Sprintf("a secret of %d bytes is too short to search for", len(s)))
}

// The schema takes upstream's health-check fields and the endpoint TLS
// shape, and refuses what cannot be meant, naming the field.
func TestEndpointTLSAndHealthCheckFieldsAreValidated(t *testing.T) {
	e := newEnv(t)
	ca := &v1alpha1.NamespacedKeyRef{Namespace: "ns", Name: "ca"}
	for i, c := range []struct {
		name    string
		mutate  func(p *v1alpha1.InferenceProvider)
		refused string // "" when accepted
	}{
		{"interval", func(p *v1alpha1.InferenceProvider) {
			p.Spec.HealthCheck = &v1alpha1.HealthCheck{Path: "/health", Interval: "2m", Timeout: "500ms"}
		}, ""},
		{"interval and periodSeconds equal", func(p *v1alpha1.InferenceProvider) {
			p.Spec.HealthCheck = &v1alpha1.HealthCheck{Interval: "30s", PeriodSeconds: 30}
		}, ""},
		{"interval and periodSeconds differ", func(p *v1alpha1.InferenceProvider) {
			p.Spec.HealthCheck = &v1alpha1.HealthCheck{Interval: "30s", PeriodSeconds: 10}
		}, "interval and periodSeconds are one setting"},
		{"interval too short", func(p *v1alpha1.InferenceProvider) {
			p.Spec.HealthCheck = &v1alpha1.HealthCheck{Interval: "1s"}
		}, "interval is between 5s and 1h"},
		{"interval not a duration", func(p *v1alpha1.InferenceProvider) {
			p.Spec.HealthCheck = &v1alpha1.HealthCheck{Interval: "soon"}
		}, "spec.healthCheck.interval"},
		{"path without its slash", func(p *v1alpha1.InferenceProvider) {
			p.Spec.HealthCheck = &v1alpha1.HealthCheck{Path: "health"}
		}, "spec.healthCheck.path"},
		{"tls from a ConfigMap, per feature", func(p *v1alpha1.InferenceProvider) {
			p.Spec.HealthCheck = &v1alpha1.HealthCheck{TLS: &v1alpha1.EndpointTLSConfig{CAConfigMapRef: ca, ServerName: "provider.internal"}}
			p.Spec.MetricsConfig = &v1alpha1.MetricsConfig{TLS: &v1alpha1.EndpointTLSConfig{CASecretRef: ca,
				ClientCertificateSecretRef: &v1alpha1.ClientCertificateSecretRef{Namespace: "ns", Name: "client"}},
				Auth: &v1alpha1.EndpointAuth{Type: "serviceAccountToken", AllowPlaintext: true}}
		}, ""},
		{"tls naming two CAs", func(p *v1alpha1.InferenceProvider) {
			p.Spec.TLS = &v1alpha1.EndpointTLSConfig{CASecretRef: ca, CAConfigMapRef: ca}
		}, "set exactly one of caSecretRef and caConfigMapRef"},
		{"tls naming no CA", func(p *v1alpha1.InferenceProvider) {
			p.Spec.TLS = &v1alpha1.EndpointTLSConfig{ClientCertificateSecretRef: &v1alpha1.ClientCertificateSecretRef{Namespace: "ns", Name: "client"}}
		}, "set exactly one of caSecretRef and caConfigMapRef"},
		{"auth of another type", func(p *v1alpha1.InferenceProvider) {
			p.Spec.MetricsConfig = &v1alpha1.MetricsConfig{Auth: &v1alpha1.EndpointAuth{Type: "basic"}}
		}, "spec.metricsConfig.auth.type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := e.provider(fmt.Sprintf("fields-%d", i), "net", "m")
			c.mutate(p)
			want := p.Spec.DeepCopy() // Create overwrites p with the answer
			err := e.admin.Create(e.ctx, p)
			if c.refused == "" {
				require.NoError(t, err)
				var got v1alpha1.InferenceProvider
				require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(p), &got))
				assert.Equal(t, want.HealthCheck, got.Spec.HealthCheck, "nothing pruned")
				if want.MetricsConfig != nil {
					assert.Equal(t, want.MetricsConfig.TLS.CASecretRef, got.Spec.MetricsConfig.TLS.CASecretRef, "nothing pruned")
					assert.Equal(t, want.MetricsConfig.Auth, got.Spec.MetricsConfig.Auth, "nothing pruned")
					assert.Equal(t, "tls.crt", got.Spec.MetricsConfig.TLS.ClientCertificateSecretRef.CertificateKey, "upstream's default")
				}
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.refused)
		})
	}
}
