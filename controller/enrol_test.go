package controller_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/trust/enrol"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// testIssuer is an issuer site's enrolment service on loopback over real
// TLS: the enrol server with a grid CA held in memory, its tokens in a
// Secret of the test's API server, and the serving certificate of site
// site-hub.
type testIssuer struct {
	ca      *sitetrust.CA
	caPEM   []byte
	tokens  *enrol.Tokens
	addr    string
	mu      sync.Mutex
	refused []string
	// dropRenewals is how many renewals to answer into the void: issued
	// and recorded, the answer kept in lost and the connection cut, as an
	// answer lost on the network is.
	dropRenewals int
	// dropEnrolments is dropRenewals for enrolments.
	dropEnrolments int
	lost           [][]byte
	// down cuts every connection before anything is answered, as an
	// issuer that is down does; the requests it cut are at attempts.
	down     bool
	attempts []time.Time
}

// swallowed answers a request into a buffer, the connection's read
// deadline still reachable (Unwrap) as the issuer needs it.
type swallowed struct {
	http.ResponseWriter
	header http.Header
	status int
	body   bytes.Buffer
}

func (s *swallowed) Header() http.Header         { return s.header }
func (s *swallowed) WriteHeader(status int)      { s.status = status }
func (s *swallowed) Write(b []byte) (int, error) { return s.body.Write(b) }
func (s *swallowed) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// serve answers as the issuer does, dropping the answers it was told to.
func (i *testIssuer) serve(srv http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i.mu.Lock()
		if i.down {
			// Attempts are enrolments and renewals; a site's other requests
			// (the trust bundle) are cut too, and not counted.
			if r.URL.Path == enrol.EnrollPath || r.URL.Path == enrol.RenewPath {
				i.attempts = append(i.attempts, time.Now())
			}
			i.mu.Unlock()
			panic(http.ErrAbortHandler)
		}
		drop := r.URL.Path == enrol.RenewPath && i.dropRenewals > 0 || r.URL.Path == enrol.EnrollPath && i.dropEnrolments > 0
		switch {
		case drop && r.URL.Path == enrol.RenewPath:
			i.dropRenewals--
		case drop:
			i.dropEnrolments--
		}
		i.mu.Unlock()
		if !drop {
			srv.ServeHTTP(w, r)
			return
		}
		answer := &swallowed{ResponseWriter: w, header: http.Header{}, status: http.StatusOK}
		srv.ServeHTTP(answer, r)
		i.mu.Lock()
		if answer.status == http.StatusOK {
			i.lost = append(i.lost, answer.body.Bytes())
		}
		i.mu.Unlock()
		panic(http.ErrAbortHandler) // the connection is cut, nothing answered
	})
}

func (i *testIssuer) Authority(_ context.Context, _ string) (*sitetrust.CA, []string, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.ca, append([]string(nil), i.refused...), nil
}

func (i *testIssuer) setDown(down bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.down = down
}

func (i *testIssuer) cut() []time.Time {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]time.Time(nil), i.attempts...)
}

func (i *testIssuer) refuse(site string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.refused = append(i.refused, site)
}

func startIssuer(t *testing.T, e *env, lifetime time.Duration) *testIssuer {
	t.Helper()
	caPEM, caKey, err := sitetrust.NewCA(time.Now(), 24*time.Hour)
	require.NoError(t, err)
	ca, err := sitetrust.ParseCA(caPEM, caKey)
	require.NoError(t, err)
	i := &testIssuer{ca: ca, caPEM: caPEM, tokens: &enrol.Tokens{API: e.admin, Namespace: e.credNS, Name: "issuer-tokens"}}
	srv, err := enrol.NewServer(i, i.tokens, lifetime, slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	i.addr = serveEnrolment(t, ca, srv, i.serve)
	return i
}

// serveEnrolment serves srv's paths over TLS on loopback as issuer site
// site-hub of ca (wrap, when set, wraps the handler), and returns the
// address.
func serveEnrolment(t *testing.T, ca *sitetrust.CA, srv http.Handler, wrap ...func(http.Handler) http.Handler) string {
	t.Helper()
	chain, key, err := ca.Issue("site-hub", time.Now(), time.Hour)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(chain, key)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	mux := http.NewServeMux()
	mux.Handle(enrol.EnrollPath, srv)
	mux.Handle(enrol.RenewPath, srv)
	var h http.Handler = mux
	for _, w := range wrap {
		h = w(h)
	}
	hs := httptest.NewUnstartedServer(h)
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: roots, ClientAuth: tls.VerifyClientCertIfGiven}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	return hs.Listener.Addr().String()
}

// enrollingNetwork is a network (not yet created) whose site site-a
// enrols with issuer: the grid CA's certificate in a ConfigMap, a token
// for site-a in a Secret, its certificate to be written into site-cert.
func enrollingNetwork(t *testing.T, e *env, issuer *testIssuer) (*v1alpha1.GridNetwork, string) {
	t.Helper()
	network := e.network()
	token, err := issuer.tokens.Add(e.ctx, network.Name, "site-a", time.Hour, time.Now())
	require.NoError(t, err)
	e.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "grid-ca", Namespace: e.credNS}, Data: map[string]string{"ca.crt": string(issuer.caPEM)}})
	e.create(e.secret("enrol-token", map[string][]byte{"token": []byte(token)}))
	network.Spec.TLS = &v1alpha1.GridTLS{
		CAConfigMapRef: &v1alpha1.NamespacedKeyRef{Name: "grid-ca", Namespace: e.credNS},
		SiteSecretRef:  &v1alpha1.NamespacedName{Name: "site-cert", Namespace: e.credNS},
		SiteCertificate: &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateEnrolled,
			Issuer:                   &v1alpha1.EnrollmentIssuer{Address: issuer.addr, Site: "site-hub"},
			EnrollmentTokenSecretRef: &v1alpha1.NamespacedKeyRef{Name: "enrol-token", Namespace: e.credNS}},
	}
	return network, token
}

// An enrolled site holds only the grid CA's certificate: it makes its key,
// sends a certificate request with the one-time token, and writes the
// certificate the issuer returns; the token is spent. Its certificate is
// renewed with the current one, no token; once the issuer refuses the
// renewal, the site keeps its certificate until it expires and then says
// so (IdentityExpired).
func TestAnEnrolledSiteObtainsAndRenewsItsCertificate(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	e.grantTrustSecrets("site-cert")
	// Short certificates, so that renewals and an expiry happen in the
	// test: renewed two thirds in, at six seconds.
	issuer := startIssuer(t, e, 9*time.Second)
	network, token := enrollingNetwork(t, e, issuer)
	e.create(network)
	reg := prometheus.NewRegistry()
	e.startAgent(withSiteTrust("site-a", time.Hour, time.Second), func(o *controller.ManagerOptions) { o.Registerer = reg })

	identity := func(reason string) *v1alpha1.GridNetwork {
		return e.networkStatus(network, "SiteIdentity "+reason, func(n *v1alpha1.GridNetwork) (bool, string) {
			c := condition(n, controller.ConditionSiteIdentity)
			return c.Reason == reason, c.Reason + ": " + c.Message
		})
	}
	// The reason says Enrolled until the next reconcile says Current: the
	// Secret and the counters are what stays.
	e.eventually("the site certificate enrolled", func() (bool, string) {
		d := e.secretData("site-cert")
		return len(d["tls.key"]) > 0 && counterOf(t, reg, "grid_site_identity_rotations_total", "enrolled") == 1, "not yet"
	})
	first := e.secretData("site-cert")
	held, err := sitetrust.ParseHeld(first["tls.crt"], first["tls.key"])
	require.NoError(t, err, "the certificate certifies the key the site made")
	require.NoError(t, sitetrust.CheckSVID(held.Leaf, "site-a"))
	roots := x509.NewCertPool()
	roots.AddCert(issuer.ca.Cert)
	_, err = held.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	assert.Equal(t, "spiffe://grid.internal/site/site-a", held.Leaf.URIs[0].String())
	// Spent: the same token enrols nothing again.
	require.ErrorIs(t, issuer.tokens.Consume(e.ctx, network.Name, "site-a", token, time.Now()), enrol.ErrTokenUnknown)

	// Renewed with the current certificate (the token is spent).
	e.eventually("the site certificate renewed", func() (bool, string) {
		d := e.secretData("site-cert")
		return d != nil && string(d["tls.crt"]) != string(first["tls.crt"]), "not yet"
	})
	renewed := e.secretData("site-cert")
	require.NotEqual(t, string(first["tls.key"]), string(renewed["tls.key"]), "a renewal certifies a new key")
	// Counted just after the Secret is written: waited for.
	e.eventually("the renewal counted", func() (bool, string) {
		n := counterOf(t, reg, "grid_site_identity_rotations_total", "rotated")
		return n > 0, fmt.Sprint(n)
	})

	// The issuer refuses the next renewal: the certificate stays in use
	// until it expires, then the site says its identity expired.
	issuer.refuse("site-a")
	got := identity(controller.ReasonEnrollmentRefused)
	assert.Contains(t, condition(got, controller.ConditionSiteIdentity).Message, "refuses site site-a's renewal")
	assert.Contains(t, condition(got, controller.ConditionSiteIdentity).Message, "stays in use until")
	got = identity(controller.ReasonIdentityExpired)
	assert.Contains(t, condition(got, controller.ConditionSiteIdentity).Message, "expired")
	assert.Positive(t, counterOf(t, reg, "grid_site_identity_rotations_total", "refused"))
	assert.Positive(t, counterOf(t, reg, "grid_site_identity_expiry_timestamp_seconds", ""), "the expiry is exported")
}

// A renewal whose answer is lost (issued and recorded by the issuer, the
// connection cut before the answer left) is retried: the site kept the
// key it asked for in its Secret, asks again for it from the same
// certificate, and the issuer answers that retry and nothing else. The
// certificate written is for the key of the lost one, and the pending
// key is gone from the Secret with that write.
func TestARenewalWhoseAnswerIsLostIsRetried(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	e.grantTrustSecrets("site-cert")
	// Renewed two thirds in, at twelve seconds: the retry (the next
	// reconcile, two seconds on) comes well before the certificate
	// expires, and long before the retried certificate's own renewal.
	issuer := startIssuer(t, e, 18*time.Second)
	network, _ := enrollingNetwork(t, e, issuer)
	issuer.mu.Lock()
	issuer.dropRenewals = 1
	issuer.mu.Unlock()
	e.create(network)
	reg := prometheus.NewRegistry()
	e.startAgent(withSiteTrust("site-a", time.Hour, time.Second), func(o *controller.ManagerOptions) { o.Registerer = reg })

	e.eventually("the site certificate enrolled", func() (bool, string) {
		d := e.secretData("site-cert")
		return len(d["tls.key"]) > 0, "not yet"
	})
	enrolled := e.secretData("site-cert")
	first, err := sitetrust.ParseHeld(enrolled["tls.crt"], enrolled["tls.key"])
	require.NoError(t, err)

	var renewed map[string][]byte
	e.eventually("the site certificate renewed", func() (bool, string) {
		renewed = e.secretData("site-cert")
		return renewed != nil && !bytes.Equal(renewed["tls.crt"], enrolled["tls.crt"]), "not yet"
	})
	issuer.mu.Lock()
	lostAnswers := issuer.lost
	issuer.mu.Unlock()
	require.Len(t, lostAnswers, 1, "the first renewal was issued and its answer lost")
	var lostAnswer enrol.Response
	require.NoError(t, json.Unmarshal(lostAnswers[0], &lostAnswer))
	lostCerts, err := sitetrust.ParseCertificates([]byte(lostAnswer.Chain))
	require.NoError(t, err)
	lost := lostCerts[0]

	held, err := sitetrust.ParseHeld(renewed["tls.crt"], renewed["tls.key"])
	require.NoError(t, err, "the certificate written certifies the key written")
	assert.Equal(t, lost.RawSubjectPublicKeyInfo, held.Leaf.RawSubjectPublicKeyInfo, "the retry asked for the key of the lost renewal")
	assert.NotEqual(t, lost.SerialNumber, held.Leaf.SerialNumber, "and was issued a certificate of its own")
	assert.NotEqual(t, first.Leaf.RawSubjectPublicKeyInfo, held.Leaf.RawSubjectPublicKeyInfo, "a renewal certifies a new key")
	assert.NotContains(t, renewed, "pending.key", "the pending key went with the write of its certificate")
	var secret corev1.Secret
	require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.credNS, Name: "site-cert"}, &secret))
	assert.Equal(t, corev1.SecretTypeTLS, secret.Type)

	assert.Positive(t, counterOf(t, reg, "grid_site_identity_rotations_total", "failed"), "the lost answer was a failed rotation")
	assert.Positive(t, counterOf(t, reg, "grid_site_identity_rotations_total", "rotated"))
}

// A first enrolment whose answer is lost: the token is spent and the name
// registered under the key asked for. The site keeps that key (it has no
// Secret to keep it in yet) and, once its operator gives it a new token,
// asks again for the same key, which the issuer's register answers; a
// new key would be refused until the issuer's operator released the
// name.
func TestAFirstEnrolmentWhoseAnswerIsLostAsksAgainForItsKey(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	e.grantTrustSecrets("site-cert")
	issuer := startIssuer(t, e, time.Hour)
	network, _ := enrollingNetwork(t, e, issuer)
	issuer.mu.Lock()
	issuer.dropEnrolments = 1
	issuer.mu.Unlock()
	e.create(network)
	e.startAgent(withSiteTrust("site-a", time.Hour, time.Second))

	identity := func() string {
		var n v1alpha1.GridNetwork
		_ = e.admin.Get(e.ctx, types.NamespacedName{Name: network.Name}, &n)
		c := condition(&n, controller.ConditionSiteIdentity)
		return c.Reason + ": " + c.Message
	}
	e.eventually("the enrolment's answer lost, and its token refused again", func() (bool, string) {
		r := identity()
		return strings.Contains(r, "used already"), r
	})
	issuer.mu.Lock()
	require.Len(t, issuer.lost, 1, "the first enrolment was issued and its answer lost")
	var lostAnswer enrol.Response
	require.NoError(t, json.Unmarshal(issuer.lost[0], &lostAnswer))
	issuer.mu.Unlock()
	lostCerts, err := sitetrust.ParseCertificates([]byte(lostAnswer.Chain))
	require.NoError(t, err)

	// The site's operator asks the issuer's for a new token.
	token, err := issuer.tokens.Add(e.ctx, network.Name, "site-a", time.Hour, time.Now())
	require.NoError(t, err)
	var tokenSecret corev1.Secret
	require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.credNS, Name: "enrol-token"}, &tokenSecret))
	tokenSecret.Data["token"] = []byte(token)
	require.NoError(t, e.admin.Update(e.ctx, &tokenSecret))
	e.eventually("the site certificate enrolled", func() (bool, string) {
		d := e.secretData("site-cert")
		return len(d["tls.key"]) > 0, identity()
	})
	d := e.secretData("site-cert")
	held, err := sitetrust.ParseHeld(d["tls.crt"], d["tls.key"])
	require.NoError(t, err)
	assert.Equal(t, lostCerts[0].RawSubjectPublicKeyInfo, held.Leaf.RawSubjectPublicKeyInfo, "the retry asked for the key of the lost enrolment")
}

// The issuer is down (it cuts every connection) when the site's renewal
// is due: the site keeps its certificate, its SiteIdentity condition
// says since when the renewal fails and until when the certificate stays
// in use, and it asks again after waits that double up to a cap (less up
// to a quarter at random), however often the network is reconciled in
// between (the resync, every 2 s here). Once the issuer is back, the site
// renews before its certificate expires. Every attempt the issuer cut is
// counted as a failed rotation.
func TestARenewalOutlastsTheIssuerBeingDown(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	e.grantTrustSecrets("site-cert")
	// Renewed two thirds in, at about 30 s; expired at 45 s: room for
	// four attempts, the issuer's return and the renewal on a loaded
	// machine.
	issuer := startIssuer(t, e, 45*time.Second)
	network, _ := enrollingNetwork(t, e, issuer)
	e.create(network)
	reg := prometheus.NewRegistry()
	const retry, retryMax = 250 * time.Millisecond, time.Second
	e.startAgent(withSiteTrust("site-a", time.Hour, time.Second), func(o *controller.ManagerOptions) {
		o.Registerer = reg
		o.SiteRenewalRetry, o.SiteRenewalRetryMax = retry, retryMax
	})
	e.eventually("the site certificate enrolled", func() (bool, string) {
		d := e.secretData("site-cert")
		return len(d["tls.key"]) > 0, "not yet"
	})
	enrolled := e.secretData("site-cert")
	first := leafOf(t, enrolled["tls.crt"])
	issuer.setDown(true)
	time.Sleep(time.Until(sitetrust.RenewAt(first)))

	got := e.networkStatus(network, "the renewal failing a few times", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, controller.ConditionSiteIdentity)
		return c.Reason == controller.ReasonIssuerUnreachable && len(issuer.cut()) >= 4, fmt.Sprintf("%d attempts; %s: %s", len(issuer.cut()), c.Reason, c.Message)
	})
	c := condition(got, controller.ConditionSiteIdentity)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	since := regexp.MustCompile(`renewal failing since (\S+),`).FindStringSubmatch(c.Message)
	require.Len(t, since, 2, c.Message)
	at, err := time.Parse(time.RFC3339, since[1])
	require.NoError(t, err)
	assert.WithinRange(t, at, sitetrust.RenewAt(first).Add(-time.Second), sitetrust.RenewAt(first).Add(5*time.Second), "failing since the renewal was due")
	assert.Contains(t, c.Message, "the current certificate stays in use until "+first.NotAfter.UTC().Format(time.RFC3339))
	assert.Equal(t, enrolled["tls.crt"], e.secretData("site-cert")["tls.crt"], "the certificate is kept")

	issuer.setDown(false)
	e.eventually("the site certificate renewed", func() (bool, string) {
		d := e.secretData("site-cert")
		return d != nil && !bytes.Equal(d["tls.crt"], enrolled["tls.crt"]), "not yet"
	})
	assert.True(t, time.Now().Before(first.NotAfter), "renewed before the certificate expired (at %s)", first.NotAfter)
	got = e.networkStatus(network, "the renewal said", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, controller.ConditionSiteIdentity)
		return c.Status == metav1.ConditionTrue, c.Reason + ": " + c.Message
	})
	assert.NotContains(t, condition(got, controller.ConditionSiteIdentity).Message, "failing")

	// Never more often than the backoff allows.
	cut := issuer.cut()
	wait := retry
	for k := 1; k < len(cut); k++ {
		assert.GreaterOrEqual(t, cut[k].Sub(cut[k-1]), wait*3/4, "attempt %d came %s after the one before", k+1, cut[k].Sub(cut[k-1]))
		wait = min(2*wait, retryMax)
	}
	e.eventually("every attempt cut counted as failed", func() (bool, string) {
		n := counterOf(t, reg, "grid_site_identity_rotations_total", "failed")
		return n == float64(len(cut)), fmt.Sprintf("%v failed, %d cut", n, len(cut))
	})
	assert.Equal(t, 1.0, counterOf(t, reg, "grid_site_identity_rotations_total", "rotated"))
}

// counterOf is a counter's (or gauge's) value with the given label value,
// any when empty.
func counterOf(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	for _, m := range gathered(t, reg, name) {
		for _, l := range m.GetLabel() {
			if label == "" || l.GetValue() == label {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// gathered is every series of the metric name in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

// The issuer's refusals, each for its reason: a reused or expired token,
// a token for another site or network, a malformed request; a request
// that asks for another organization gets the token's site all the same
// (the CA builds the subject; only the public key is carried forward).
func TestTheIssuerRefusesWhatATokenDoesNotAllow(t *testing.T) {
	e := newEnv(t)
	issuer := startIssuer(t, e, time.Hour)
	roots := x509.NewCertPool()
	roots.AddCert(issuer.ca.Cert)
	c := enrol.Client{}
	ask := func(site, token string, subject pkix.Name) ([]byte, error) {
		key, _, err := enrol.NewKey()
		require.NoError(t, err)
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject}, key)
		require.NoError(t, err)
		csr := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
		return c.Request(e.ctx, enrol.Issuer{Address: issuer.addr, Site: "site-hub"}, roots,
			enrol.Request{Network: "net", Site: site, Token: token, CSR: string(csr)}, nil, key)
	}
	refusedFor := func(err error) string {
		var r *enrol.RefusedError
		if assert.ErrorAs(t, err, &r) {
			return r.Reason + ": " + r.Message
		}
		return ""
	}
	now := time.Now()
	token, err := issuer.tokens.Add(e.ctx, "net", "site-a", time.Hour, now)
	require.NoError(t, err)
	// Another organization asked for: the certificate is site-a's.
	chain, err := ask("site-a", token, pkix.Name{Organization: []string{"site-x"}, CommonName: "site-x"})
	require.NoError(t, err)
	certs, err := sitetrust.ParseCertificates(chain)
	require.NoError(t, err)
	assert.Equal(t, []string{"site-a"}, certs[0].Subject.Organization)
	assert.Contains(t, refusedFor(ignore(ask("site-a", token, pkix.Name{}))), "was used already", "a reused token")

	other, err := issuer.tokens.Add(e.ctx, "net", "site-b", time.Hour, now)
	require.NoError(t, err)
	assert.Contains(t, refusedFor(ignore(ask("site-c", other, pkix.Name{}))), "another site", "a token for another site")
	assert.Contains(t, refusedFor(ignore(ask("site-b", other, pkix.Name{}))), "was used already", "spent by the refused attempt")

	short, err := issuer.tokens.Add(e.ctx, "net", "site-d", time.Second, now)
	require.NoError(t, err)
	time.Sleep(1100 * time.Millisecond)
	assert.Contains(t, refusedFor(ignore(ask("site-d", short, pkix.Name{}))), "expired", "an expired token")
	assert.Contains(t, refusedFor(ignore(ask("site-e", "not-a-token", pkix.Name{}))), "not a gridsync enrolment token")

	// The stored tokens are hashes: no token appears in the Secret.
	var s corev1.Secret
	require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.credNS, Name: "issuer-tokens"}, &s))
	for k, v := range s.Data {
		for _, tok := range []string{token, other, short} {
			assert.NotContains(t, k, tok)
			assert.NotContains(t, string(v), tok)
		}
	}
}

func ignore(_ []byte, err error) error { return err }
