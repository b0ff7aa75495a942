package controller_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gridsync/gridsync/controller/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/assess"
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
	e.startAgent(withProbeTransport(srv.Client().Transport))

	e.providerPhase(p, v1alpha1.ProviderDegraded, assess.ReasonHealthCheckFailing)
	cm, _ := e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 2 })
	for _, c := range candidatesOf(t, cm) {
		assert.Equal(t, c.Site != p.Name, c.Fresh, "only the degraded provider's candidate is stale: %+v", c)
	}
	stale := candidatesOf(t, cm)
	assert.Equal(t, p.Name, stale[len(stale)-1].Site, "stale candidates rank last")

	got := e.providerPhase(p, v1alpha1.ProviderUnavailable, assess.ReasonHealthCheckFailed)
	assert.Contains(t, got.Status.Message, "status 503")
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })

	healthy.Store(true)
	e.providerPhase(p, v1alpha1.ProviderAvailable, assess.ReasonReady)
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 2 })
	assert.True(t, sawToken.Load(), "the token goes to an HTTPS endpoint of the provider's own origin")
}
