package probe_test

import (
	"context"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/controller/providerpolicy"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/trust/endpointtls"
)

// An Endpoint's client is made once for its material and kept while the
// material is the same (its connection with it: one connection for many
// fetches); new material makes a new client; a client is dropped with its
// provider. Nothing but the named CA verifies the server: the prober's own
// roots trust the test server, the endpoint's CA does not, and the fetch
// fails.
func TestEndpointClientsFollowTheirMaterial(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("q 1\n")) }))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	p := newProber(nil)
	material := &endpointtls.Raw{CA: caPEM}
	e := &probe.Endpoint{Key: "Metrics/llm", TLS: func(context.Context) (*endpointtls.Raw, error) { return material, nil }}
	for range 5 {
		body, err := p.Fetch(t.Context(), srv.URL+"/metrics", probe.MaxTimeout, 1<<10, e)
		require.NoError(t, err)
		assert.Equal(t, "q 1\n", string(body))
	}
	assert.Equal(t, int64(1), conns.Load(), "unchanged material keeps its client and connection")
	assert.Equal(t, 1, p.Clients())

	// Changed material (a rotation): a new client, a new connection.
	material = &endpointtls.Raw{CA: append(append([]byte(nil), caPEM...), caPEM...)}
	_, err := p.Fetch(t.Context(), srv.URL+"/metrics", probe.MaxTimeout, 1<<10, e)
	require.NoError(t, err)
	assert.Equal(t, int64(2), conns.Load())
	assert.Equal(t, 1, p.Clients(), "the old client is replaced, not kept")

	// A CA that did not issue the server's certificate: refused, although
	// the prober's own roots would have trusted it.
	untrusted := testpki.NewRoot(t, "another-ca").PEM
	bad := &probe.Endpoint{Key: "Metrics/other", TLS: func(context.Context) (*endpointtls.Raw, error) {
		return &endpointtls.Raw{CA: untrusted}, nil
	}}
	_, err = p.Fetch(t.Context(), srv.URL+"/metrics", probe.MaxTimeout, 1<<10, bad)
	require.EqualError(t, err, probe.OutcomeTLSError)
	_, err = p.Fetch(t.Context(), srv.URL+"/metrics", probe.MaxTimeout, 1<<10, nil)
	require.NoError(t, err, "the prober's roots do trust it")

	p.RetainClients("Metrics/", map[string]bool{"other": true})
	assert.Equal(t, 1, p.Clients(), "llm's client dropped with llm")
	p.DropClient("Metrics/other")
	assert.Zero(t, p.Clients())
}

// What cannot be used is a ConfigError naming its reason, and nothing is
// sent: bad material, TLS to http://, a token without allowPlaintext to
// http://, a token that cannot be had.
func TestEndpointsThatCannotBeUsedSendNothing(t *testing.T) {
	var requests atomic.Int64
	plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { requests.Add(1) }))
	t.Cleanup(plain.Close)
	secure := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { requests.Add(1) }))
	t.Cleanup(secure.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw})
	p := newProber(nil)
	good := func(context.Context) (*endpointtls.Raw, error) { return &endpointtls.Raw{CA: caPEM}, nil }
	for _, c := range []struct {
		name, url string
		e         *probe.Endpoint
		reason    providerpolicy.Refusal
	}{
		{"garbage CA", secure.URL, &probe.Endpoint{Key: "a", TLS: func(context.Context) (*endpointtls.Raw, error) {
			return &endpointtls.Raw{CA: []byte("not pem")}, nil
		}}, providerpolicy.RefusalTLSMaterialInvalid},
		{"missing Secret", secure.URL, &probe.Endpoint{Key: "b", TLS: func(context.Context) (*endpointtls.Raw, error) {
			return nil, &endpointtls.Error{Reason: endpointtls.SecretMissing, Message: "gone"}
		}}, providerpolicy.RefusalTLSSecretMissing},
		{"TLS to http", plain.URL, &probe.Endpoint{Key: "c", TLS: good}, providerpolicy.RefusalPlaintext},
		{"token to http", plain.URL, &probe.Endpoint{Key: "d", Token: token}, providerpolicy.RefusalPlaintext},
		{"no token", secure.URL, &probe.Endpoint{Key: "e", TLS: good, Token: func(context.Context) (string, error) {
			return "", assert.AnError
		}}, providerpolicy.RefusalAuthCredentialUnavailable},
	} {
		_, err := p.Fetch(t.Context(), c.url, probe.MaxTimeout, 1<<10, c.e)
		var config *probe.ConfigError
		require.ErrorAs(t, err, &config, c.name)
		assert.Equal(t, c.reason, config.Reason, c.name)
	}
	assert.Zero(t, requests.Load())

	// allowPlaintext lets the token over http.
	_, err := p.Fetch(t.Context(), plain.URL, probe.MaxTimeout, 1<<10, &probe.Endpoint{Key: "f", Token: token, AllowPlaintext: true})
	require.NoError(t, err)
	assert.Equal(t, int64(1), requests.Load())
}
