package attack

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testpki"
)

// hostileEndpoint is a provider endpoint of the attacker's: HTTPS from its
// own CA, asking for (not requiring) a client certificate, keeping every
// certificate and token it is given.
type hostileEndpoint struct {
	*httptest.Server
	ca       *testpki.Issuer
	requests atomic.Int64
	mu       sync.Mutex
	certs    []string // subjects of the client certificates presented
	tokens   []string
}

func startHostileEndpoint(t *testing.T) *hostileEndpoint {
	h := &hostileEndpoint{ca: testpki.NewRoot(t, "attacker-ca")}
	certPEM, keyPEM := h.ca.Leaf(t, "provider", testpki.Opts{})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	h.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		h.mu.Lock()
		for _, c := range r.TLS.PeerCertificates {
			h.certs = append(h.certs, c.Subject.String())
		}
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			h.tokens = append(h.tokens, tok)
		}
		h.mu.Unlock()
		_, _ = w.Write([]byte("# TYPE q gauge\nq 1\n"))
	}))
	h.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequestClientCert}
	h.StartTLS()
	t.Cleanup(h.Close)
	return h
}

// Whoever may write an InferenceProvider names the TLS material the agent
// uses toward an endpoint of their choosing. Naming the site's own
// certificate (a GridNetwork's siteSecretRef) would have the agent act as
// its site wherever that endpoint is (a remote site's gateway trusts it);
// naming a Secret outside the agent's namespaces would read what its RBAC
// was not meant to reach. Neither is read, nothing is sent, the status
// says why. The scraper token such a writer can have sent to itself is
// worth get on /metrics for ten minutes, and nothing else.
func TestProviderEndpointDeputy(t *testing.T) {
	ctx := context.Background()
	scraperNS, scraper := "attack-scraper", fmt.Sprintf("scraper-%d", seq.Add(1))
	s := startSignalsAgent(t, framework.AgentOptions{Loopback: true, Args: []string{"--signals-interval", "200ms",
		"--scraper-service-account", scraperNS + "/" + scraper}})
	_, err := cp.ServiceAccountToken(ctx, scraperNS, scraper, "unused") // creates the account
	require.NoError(t, err)
	require.NoError(t, cp.Grant(ctx, scraperNS, scraper, "attack-"+scraper, "", rbac.ScraperRules()))
	require.NoError(t, cp.Grant(ctx, s.agentNS, "gridsync-agent", "gridsync-agent-"+scraper+"-token", scraperNS, rbac.ScraperTokenRules(scraper)))
	h := startHostileEndpoint(t)

	// The site's certificate, where a network names it, in a namespace the
	// agent works in; another certificate in the agent's own namespace,
	// which is not one of them; the attacker's CA, so that the handshake
	// itself would succeed.
	siteCA := testpki.NewRoot(t, "grid-ca")
	siteCert, siteKey := siteCA.Leaf(t, listenerSite, testpki.Opts{})
	for _, sec := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: s.gwNS, Name: "site-identity"}, Data: map[string][]byte{"tls.crt": siteCert, "tls.key": siteKey}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: s.agentNS, Name: "agent-only"}, Data: map[string][]byte{"tls.crt": siteCert, "tls.key": siteKey}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: s.gwNS, Name: "attacker-ca"}, Data: map[string][]byte{"ca.crt": h.ca.PEM}},
	} {
		require.NoError(t, s.admin.Create(ctx, sec))
	}
	holder := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: s.network + "-identity"}, Spec: v1alpha1.GridNetworkSpec{
		TLS: &v1alpha1.GridTLS{SiteSecretRef: &v1alpha1.NamespacedName{Namespace: s.gwNS, Name: "site-identity"}}}}
	require.NoError(t, s.admin.Create(ctx, holder))
	t.Cleanup(func() { _ = s.admin.Delete(context.Background(), holder) })

	provider := func(name string, cert *v1alpha1.ClientCertificateSecretRef, auth *v1alpha1.EndpointAuth) *v1alpha1.InferenceProvider {
		p := &v1alpha1.InferenceProvider{ObjectMeta: metav1.ObjectMeta{Name: s.network + "-" + name}, Spec: v1alpha1.InferenceProviderSpec{
			GridNetworkRef: s.network, ProviderKind: "vllm", BackendKind: "openai_compatible", Endpoint: h.URL,
			Models: []v1alpha1.Model{{Name: "m"}},
			TLS: &v1alpha1.EndpointTLSConfig{CASecretRef: &v1alpha1.NamespacedKeyRef{Namespace: s.gwNS, Name: "attacker-ca"},
				ClientCertificateSecretRef: cert},
			MetricsConfig: &v1alpha1.MetricsConfig{Timeout: "1s", Auth: auth, SignalNames: v1alpha1.MetricSignalNames{QueueDepth: "q"}},
		}}
		require.NoError(t, s.admin.Create(ctx, p))
		t.Cleanup(func() { _ = s.admin.Delete(context.Background(), p) })
		return p
	}
	borrowed := provider("borrowed-identity", &v1alpha1.ClientCertificateSecretRef{Namespace: s.gwNS, Name: "site-identity"}, nil)
	elsewhere := provider("elsewhere", &v1alpha1.ClientCertificateSecretRef{Namespace: s.agentNS, Name: "agent-only"}, nil)
	thief := provider("token-thief", nil, &v1alpha1.EndpointAuth{Type: v1alpha1.EndpointAuthServiceAccountToken})

	reason := func(p *v1alpha1.InferenceProvider) string {
		var got v1alpha1.InferenceProvider
		if s.admin.Get(ctx, types.NamespacedName{Name: p.Name}, &got) != nil {
			return ""
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, "MetricsScraped"); c != nil {
			return c.Reason
		}
		return ""
	}
	if !assert.Eventually(t, func() bool {
		return reason(borrowed) != "" && reason(elsewhere) != "" && reason(thief) == "Scraped"
	}, 30*time.Second, 100*time.Millisecond) {
		t.Fatalf("the providers' scrapes were never reported: %q %q %q", reason(borrowed), reason(elsewhere), reason(thief))
	}
	time.Sleep(time.Second) // five more rounds

	h.mu.Lock()
	presented, tokens := len(h.certs), append([]string(nil), h.tokens...)
	h.mu.Unlock()
	require.NotEmpty(t, tokens, "the thief's endpoint got the scraper token (as the feature does)")
	lifetime := tokenLifetime(t, tokens[len(tokens)-1])
	may := func(attrs authorizationv1.SubjectAccessReviewSpec) bool {
		attrs.User, attrs.Groups = "system:serviceaccount:"+scraperNS+":"+scraper, []string{"system:serviceaccounts", "system:authenticated"}
		sar, err := cp.AdminClient().AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: attrs}, metav1.CreateOptions{})
		require.NoError(t, err)
		return sar.Status.Allowed
	}
	readsSecrets := may(authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Namespace: s.gwNS, Resource: "secrets"}})
	listsPods := may(authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}})
	writesGrid := may(authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "patch", Group: "grid.praxis.fast", Resource: "inferenceproviders"}})
	getsMetrics := may(authorizationv1.SubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}})
	held := presented == 0 && reason(borrowed) == "MetricsTlsSecretMissing" && reason(elsewhere) == "MetricsTlsSecretMissing" &&
		!readsSecrets && !listsPods && !writesGrid && getsMetrics && lifetime <= 10*time.Minute
	report(t, "provider_endpoint_deputy", held,
		figure{"client_certificates_presented", presented}, figure{"borrowed_identity", reason(borrowed)},
		figure{"outside_namespaces", reason(elsewhere)}, figure{"stolen_token_lifetime_s", int(lifetime.Seconds())},
		figure{"token_reads_secrets", readsSecrets}, figure{"token_lists_pods", listsPods},
		figure{"token_writes_grid", writesGrid}, figure{"token_gets_metrics", getsMetrics})
}

// tokenLifetime reads a JWT's exp minus iat (the token is not verified:
// only its claims are read, as the thief would).
func tokenLifetime(t *testing.T, token string) time.Duration {
	parts := strings.Split(token, ".")
	require.Len(t, parts, 3)
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims struct {
		Exp, Iat int64
	}
	require.NoError(t, json.Unmarshal(payload, &claims))
	return time.Duration(claims.Exp-claims.Iat) * time.Second
}
