package controller_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/probe"
	assess "github.com/gridsync/gridsync/controller/providerpolicy"
	"github.com/gridsync/gridsync/shared/envelope"
)

// A failing health check makes the provider Degraded (its candidates no
// longer fresh) at once and Unavailable (left out) after three failures
// in a row; recovery brings it back.
func TestFailingHealthCheckDegradesThenExcludesTheProvider(t *testing.T) {
	var healthy atomic.Bool
	var sawToken atomic.Bool
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer probe-token" {
			sawToken.Store(true)
		}
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()

	e := newEnv(t)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	e.create(network)
	e.create(e.secret("probe", map[string][]byte{"token": []byte("probe-token")}))
	p := e.provider("flaky", network.Name, "model-a")
	p.Spec.Endpoint = srv.URL
	p.Spec.Auth = e.bearer("probe", "token")
	p.Spec.HealthCheck = &v1alpha1.HealthCheck{Endpoint: srv.URL + "/healthz", PeriodSeconds: 5}
	e.create(p)
	e.create(e.provider("steady", network.Name, "model-b"))
	e.startAgent(withProbesTo(srv))

	e.providerPhase(p, v1alpha1.ProviderDegraded, assess.ReasonHealthCheckFailing)
	// The network re-renders after the provider's status: wait for the
	// overlay that marks the degraded provider's candidate stale.
	var cm *corev1.ConfigMap
	e.eventually("the degraded provider's candidate goes stale", func() (bool, string) {
		cm, _ = e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 2 })
		for _, c := range candidatesOf(t, cm) {
			if c.Site == p.Name {
				return !c.Fresh, fmt.Sprintf("fresh %v", c.Fresh)
			}
		}
		return false, "no candidate of the provider"
	})
	for _, c := range candidatesOf(t, cm) {
		assert.Equal(t, c.Site != p.Name, c.Fresh, "only the degraded provider's candidate is stale: %+v", c)
	}
	stale := candidatesOf(t, cm)
	assert.Equal(t, p.Name, stale[len(stale)-1].Site, "stale candidates rank last")

	got := e.providerPhase(p, v1alpha1.ProviderUnavailable, assess.ReasonHealthCheckFailed)
	assert.Contains(t, got.Status.Message, probe.OutcomeServerError)
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })

	healthy.Store(true)
	e.providerPhase(p, v1alpha1.ProviderAvailable, assess.ReasonReady)
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 2 })
	assert.True(t, sawToken.Load(), "the token goes to an HTTPS endpoint of the provider's own origin")
}

// recordingServer is a provider's HTTPS endpoint that records the bearer
// tokens it receives.
func recordingServer(t *testing.T) (*httptest.Server, *atomic.Int64, *atomic.Value) {
	t.Helper()
	var requests atomic.Int64
	var lastAuth atomic.Value
	lastAuth.Store("")
	srv := httptest.NewTLSServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		lastAuth.Store(r.Header.Get("Authorization"))
	}))
	t.Cleanup(srv.Close)
	return srv, &requests, &lastAuth
}

// With a probe Secret selector, a Secret that does not match is never
// sent: the probe goes without it and the status says so. Labelling the
// Secret lets the token go.
func TestProbeSecretSelectorWithholdsUnmarkedSecrets(t *testing.T) {
	srv, requests, lastAuth := recordingServer(t)
	e := newEnv(t)
	network := e.network(e.gateway("edge", "east"))
	e.create(network)
	secret := e.secret("probe", map[string][]byte{"token": []byte("chosen-token")})
	e.create(secret)
	p := e.provider("guarded", network.Name, "model-a")
	p.Spec.Endpoint = srv.URL
	p.Spec.Auth = e.bearer("probe", "token")
	p.Spec.HealthCheck = &v1alpha1.HealthCheck{Endpoint: srv.URL + "/healthz", PeriodSeconds: 5}
	e.create(p)
	selector, err := labels.Parse("grid.praxis.fast/probe-credential=true")
	require.NoError(t, err)
	e.startAgent(withProbesTo(srv), func(o *controller.ManagerOptions) { o.ProbeSecretSelector = selector })

	got := e.providerPhase(p, v1alpha1.ProviderAvailable, assess.ReasonReady)
	e.eventually("withheld noted", func() (bool, string) {
		require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(p), got))
		return strings.Contains(got.Status.Message, "probes carry no token"), got.Status.Message
	})
	assert.Positive(t, requests.Load())
	assert.Empty(t, lastAuth.Load(), "the unmarked Secret's token is never sent")

	secret.Labels = map[string]string{"grid.praxis.fast/probe-credential": "true"}
	require.NoError(t, e.admin.Update(e.ctx, secret))
	e.eventually("token sent once the Secret is marked", func() (bool, string) {
		require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(p), got))
		return lastAuth.Load() == "Bearer chosen-token" && !strings.Contains(got.Status.Message, "no token"), got.Status.Message
	})
}

// By default probes never reach loopback (nor link-local or metadata
// addresses): the provider's status says the destination is denied, and
// nothing of the target's answer.
func TestProbesToDeniedDestinationsAreRefused(t *testing.T) {
	srv, requests, _ := recordingServer(t)
	e := newEnv(t)
	network := e.network(e.gateway("edge", "east"))
	e.create(network)
	p := e.provider("internal", network.Name, "model-a")
	p.Spec.HealthCheck = &v1alpha1.HealthCheck{Endpoint: srv.URL + "/admin", PeriodSeconds: 5}
	e.create(p)
	e.startAgent()

	got := e.providerPhase(p, v1alpha1.ProviderDegraded, assess.ReasonHealthCheckFailing)
	assert.Contains(t, got.Status.Message, probe.OutcomeDestinationDenied)
	assert.NotContains(t, got.Status.Message, "127.0.0.1")
	assert.Zero(t, requests.Load(), "no request reached the loopback server")
}

// A health check without an endpoint probes the provider's own endpoint;
// with credentialsManagedExternally no token is sent, none projected.
func TestAnEmptyHealthCheckProbesTheProvidersEndpoint(t *testing.T) {
	srv, requests, lastAuth := recordingServer(t)
	e := newEnv(t)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	e.create(network)
	e.create(e.secret("external", map[string][]byte{"token": []byte("never-sent")}))
	p := e.provider("self-probed", network.Name, "model-a")
	p.Spec.Endpoint = srv.URL + "/v1"
	p.Spec.Auth = e.bearer("external", "token")
	p.Spec.Auth.CredentialsManagedExternally = true
	p.Spec.HealthCheck = &v1alpha1.HealthCheck{}
	e.create(p)
	e.startAgent(withProbesTo(srv))

	e.eventually("probed", func() (bool, string) { return requests.Load() > 0, "no probe yet" })
	assert.Empty(t, lastAuth.Load(), "externally managed: no token in probes")
	cm, _ := e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })
	for _, c := range candidatesOf(t, cm) {
		assert.Nil(t, c.Credential, "externally managed: no credential reference projected")
	}
}
