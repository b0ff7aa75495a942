package gatewayaddr

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
)

func TestAddress(t *testing.T) {
	lb := func(ingress []corev1.LoadBalancerIngress, ports ...int32) *corev1.Service {
		s := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
		for _, p := range ports {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: p})
		}
		s.Status.LoadBalancer.Ingress = ingress
		return s
	}
	for name, c := range map[string]struct {
		svc  *corev1.Service
		port int
		want string
	}{
		"hostname first":          {lb([]corev1.LoadBalancerIngress{{Hostname: "gw.example.test", IP: "192.0.2.1"}}, 8443), 0, "gw.example.test:8443"},
		"IP":                      {lb([]corev1.LoadBalancerIngress{{IP: "192.0.2.1"}, {IP: "192.0.2.2"}}, 9000), 0, "192.0.2.1:9000"},
		"IPv6":                    {lb([]corev1.LoadBalancerIngress{{IP: "2001:db8::1"}}, 8443), 0, "[2001:db8::1]:8443"},
		"explicit port wins":      {lb([]corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}, 9000), 8443, "192.0.2.1:8443"},
		"no port: 8080":           {lb([]corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}), 0, "192.0.2.1:8080"},
		"no ingress yet":          {lb(nil, 8443), 0, ""},
		"ClusterIP supplies none": {&corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}, 0, ""},
	} {
		t.Run(name, func(t *testing.T) {
			got, why := Address(c.svc, c.port, "")
			assert.Equal(t, c.want, got)
			if c.want == "" {
				assert.NotEmpty(t, why)
			}
		})
	}
}

// A production endpoint's named port: the Service port of that name, not
// its first; a Service without it advertises none rather than another port.
func TestAddressOfANamedPort(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{
		{Name: "http", Port: 8080}, {Name: "https", Port: 8443},
	}}}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	got, _ := Address(svc, 0, "https")
	assert.Equal(t, "192.0.2.1:8443", got)
	got, why := Address(svc, 0, "grpc")
	assert.Empty(t, got)
	assert.Contains(t, why, "no port named grpc")
	got, _ = Address(svc, 0, "")
	assert.Equal(t, "192.0.2.1:8080", got, "without a name: the first port, as the reference's discovery")
}
