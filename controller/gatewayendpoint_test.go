package controller_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// The schema takes the reference's GridSite as it is written, and holds
// the structured endpoint to one reading: host and port together and in
// agreement with address, a host that is a name or a canonical address a
// site can be reached at, a scope that holds the host, a protocol that
// goes with the TLS mode; the structured fields under upstream's earlier
// name are refused.
func TestAPIServerValidatesTheStructuredGatewayEndpoint(t *testing.T) {
	e := newEnv(t)
	site := func(name string, ep *v1alpha1.GatewayEndpoint) *v1alpha1.GridSite {
		return &v1alpha1.GridSite{ObjectMeta: metav1.ObjectMeta{Name: e.id + "-" + name, Labels: map[string]string{"test": e.id}},
			Spec: v1alpha1.GridSiteSpec{GridNetworkRef: "net", GatewayEndpoint: ep}}
	}
	mutual := &v1alpha1.GatewayTLS{Mode: "Mutual", ServerName: "provider.example.com"}
	// Applied only: no agent runs in this test, so nothing dials them.
	accepted := map[string]*v1alpha1.GatewayEndpoint{
		"reference": {Address: "provider.example.com:8443", TLS: mutual},
		"structured": {Address: "provider.example.com:8443", Host: "provider.example.com", Port: 8443, Protocol: "HTTPS",
			AddressScope: "Public", Generation: 3, TLS: mutual},
		"ipv6":      {Address: "[2001:db8::1]:443", Host: "2001:db8::1", Port: 443, AddressScope: "Public"},
		"private":   {Host: "10.0.0.4", Port: 8443, AddressScope: "Private"},
		"loopback":  {Host: "127.0.0.1", Port: 8443, AddressScope: "Loopback"},
		"plaintext": {Host: "10.0.0.4", Port: 8080, Protocol: "HTTP", TLS: &v1alpha1.GatewayTLS{Mode: "Plaintext"}},
	}
	for name, ep := range accepted {
		gs := site(name, ep)
		require.NoError(t, e.admin.Create(e.ctx, gs), name)
		t.Cleanup(func() { _ = e.admin.Delete(e.ctx, gs) })
	}
	refused := map[string]struct {
		ep   *v1alpha1.GatewayEndpoint
		want string
	}{
		"host without port":        {&v1alpha1.GatewayEndpoint{Host: "provider.example.com"}, "host and port are set together"},
		"address disagrees":        {&v1alpha1.GatewayEndpoint{Address: "provider.example.com:8443", Host: "provider.example.com", Port: 443}, "address and host:port"},
		"ipv6 address unbracketed": {&v1alpha1.GatewayEndpoint{Address: "2001:db8::1:443", Host: "2001:db8::1", Port: 443}, "address and host:port"},
		"uppercase host":           {&v1alpha1.GatewayEndpoint{Host: "Provider.example.com", Port: 443}, "lowercase DNS name"},
		"numeric name":             {&v1alpha1.GatewayEndpoint{Host: "10.1", Port: 443}, "not ending in a number"},
		"non-canonical ipv6":       {&v1alpha1.GatewayEndpoint{Host: "2001:db8:0::1", Port: 443}, "canonical IP address"},
		"unspecified":              {&v1alpha1.GatewayEndpoint{Host: "0.0.0.0", Port: 443}, "canonical IP address"},
		"link-local":               {&v1alpha1.GatewayEndpoint{Host: "169.254.169.254", Port: 80}, "canonical IP address"},
		"port out of range":        {&v1alpha1.GatewayEndpoint{Host: "10.0.0.4", Port: 70000}, "spec.gatewayEndpoint.port"},
		"scope public, loopback":   {&v1alpha1.GatewayEndpoint{Host: "127.0.0.1", Port: 8443, AddressScope: "Public"}, "addressScope does not hold"},
		"scope public, private":    {&v1alpha1.GatewayEndpoint{Host: "192.168.1.4", Port: 8443, AddressScope: "Public"}, "addressScope does not hold"},
		"scope private, public":    {&v1alpha1.GatewayEndpoint{Host: "8.8.8.8", Port: 8443, AddressScope: "Private"}, "addressScope does not hold"},
		"unknown scope":            {&v1alpha1.GatewayEndpoint{Host: "8.8.8.8", Port: 8443, AddressScope: "Galactic"}, "spec.gatewayEndpoint.addressScope"},
		"HTTP with Mutual":         {&v1alpha1.GatewayEndpoint{Host: "10.0.0.4", Port: 8443, Protocol: "HTTP"}, "protocol HTTPS goes with"},
		"HTTPS with Plaintext":     {&v1alpha1.GatewayEndpoint{Host: "10.0.0.4", Port: 8443, Protocol: "HTTPS", TLS: &v1alpha1.GatewayTLS{Mode: "Plaintext"}}, "protocol HTTPS goes with"},
		"negative generation":      {&v1alpha1.GatewayEndpoint{Host: "10.0.0.4", Port: 8443, Generation: -1}, "spec.gatewayEndpoint.generation"},
	}
	for name, tt := range refused {
		err := e.admin.Create(e.ctx, site("refused", tt.ep))
		require.Error(t, err, name)
		assert.True(t, apierrors.IsInvalid(err), "%s: %v", name, err)
		assert.Contains(t, err.Error(), tt.want, name)
	}
	egress := site("egress", nil)
	egress.Spec.Egress = &v1alpha1.GatewayEndpoint{Address: "10.0.0.4:8443", Host: "10.0.0.4", Port: 8443}
	err := e.admin.Create(e.ctx, egress)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "write the structured endpoint under gatewayEndpoint")
}

// The probe dials the structured endpoint (host and port; the SNI is
// tls.serverName, here SPIFFE's default), every resolved address held to
// its addressScope; an address that does not read one way is never
// dialled, and a routable site whose endpoint becomes one is withdrawn.
func TestTheProbeDialsTheStructuredEndpointWithinItsScope(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	network := e.spiffeNetwork("east")
	e.create(network)
	e.startAgent(withSiteTrust("east", time.Hour, time.Second))
	ca, _ := e.gridCA()
	gw, err := testgateway.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	presentIssued(t, gw, ca, "north")
	_, portText, err := net.SplitHostPort(gw.Addr)
	require.NoError(t, err)
	port, err := strconv.Atoi(portText)
	require.NoError(t, err)

	north := &v1alpha1.GridSite{ObjectMeta: metav1.ObjectMeta{Name: network.Name + "-north", Labels: map[string]string{"test": e.id}}, Spec: v1alpha1.GridSiteSpec{
		GridNetworkRef:  network.Name,
		GatewayEndpoint: &v1alpha1.GatewayEndpoint{Host: "localhost", Port: int32(port), AddressScope: "Loopback", Protocol: "HTTPS"},
	}}
	e.create(north)
	key := client.ObjectKeyFromObject(north)
	e.gridSite(key, "Active on host and port", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseActive && gs.Status.Reason == sitetrust.ReasonTLSVerified
	})

	// The name resolves to loopback, outside the scope now declared: not
	// dialled, and the site is withdrawn.
	update(e, north, func(gs *v1alpha1.GridSite) { gs.Spec.GatewayEndpoint.AddressScope = "Private" })
	got := e.gridSite(key, "Unreachable outside its scope", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseUnreachable && gs.Status.Reason == sitetrust.ReasonConnectionFailed
	})
	assert.Contains(t, got.Status.Message, "outside addressScope Private")

	// Back in scope, Active again; then an address that a dialer would
	// read (IPv4 in brackets) but that does not read one way: never
	// dialled, the site demoted.
	update(e, got, func(gs *v1alpha1.GridSite) { gs.Spec.GatewayEndpoint.AddressScope = "Loopback" })
	got = e.gridSite(key, "Active again", func(gs *v1alpha1.GridSite) bool { return gs.Status.Phase == sitetrust.PhaseActive })
	update(e, got, func(gs *v1alpha1.GridSite) {
		gs.Spec.GatewayEndpoint = &v1alpha1.GatewayEndpoint{Address: "[127.0.0.1]:" + portText}
	})
	got = e.gridSite(key, "GatewayEndpointInvalid", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseConnecting && gs.Status.Reason == sitetrust.ReasonGatewayEndpointInvalid
	})
	assert.Contains(t, got.Status.Message, "an IPv6 address is written in brackets")
}
