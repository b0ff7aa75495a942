// Package gatewayaddr finds the address of the site's data-plane gateway that
// the agent advertises to the other sites: the first ingress of a
// LoadBalancer Service, read every few seconds, as the Grid reference's
// self-discovery does.
package gatewayaddr

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/gossip/sites"
)

// DefaultPort is advertised when neither a port is given nor the Service
// declares one.
const DefaultPort = 8080

// Discovery polls a Service for the gateway address.
type Discovery struct {
	Reader  client.Reader
	Service types.NamespacedName
	Port    int // 0: the Service's first port, else DefaultPort
	// PortName, when set, names the Service port advertised (a production
	// endpoint's named port): a Service without it advertises none.
	PortName string
	Interval time.Duration
	Logger   *slog.Logger
	// Set receives each new address ("" when the Service has none).
	Set func(address string)
}

// NeedLeaderElection: only the leader advertises.
func (d *Discovery) NeedLeaderElection() bool { return true }

// Start polls until ctx ends.
func (d *Discovery) Start(ctx context.Context) error {
	last, first := "", true
	t := time.NewTicker(d.Interval)
	defer t.Stop()
	for {
		addr, why := d.read(ctx)
		if addr != last || first {
			if addr == "" {
				d.Logger.Info("gateway_address_missing", "service", d.Service.String(), "why", why)
			} else {
				d.Logger.Info("gateway_address_discovered", "service", d.Service.String(), "address", addr)
			}
			d.Set(addr)
			last, first = addr, false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (d *Discovery) read(ctx context.Context) (string, string) {
	var svc corev1.Service
	if err := d.Reader.Get(ctx, d.Service, &svc); err != nil {
		return "", err.Error()
	}
	return Address(&svc, d.Port, d.PortName)
}

// Address is the gateway address a Service supplies: its first
// LoadBalancer ingress (hostname, else IP) and the given port, else the
// port named portName, else its first port, else DefaultPort. A Service
// of another type supplies none, nor one without the named port.
func Address(svc *corev1.Service, port int, portName string) (string, string) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return "", "the Service is of type " + string(svc.Spec.Type) + ", not LoadBalancer: set the gateway address explicitly"
	}
	if len(svc.Status.LoadBalancer.Ingress) == 0 {
		return "", "the Service has no LoadBalancer ingress yet"
	}
	in := svc.Status.LoadBalancer.Ingress[0]
	host := in.Hostname
	if host == "" {
		host = in.IP
	}
	if host == "" {
		return "", "the first ingress has neither hostname nor IP"
	}
	if port == 0 && portName != "" {
		for _, p := range svc.Spec.Ports {
			if p.Name == portName && p.Port > 0 {
				port = int(p.Port)
			}
		}
		if port == 0 {
			return "", "the Service has no port named " + portName
		}
	}
	if port == 0 {
		port = DefaultPort
		if len(svc.Spec.Ports) > 0 && svc.Spec.Ports[0].Port > 0 {
			port = int(svc.Spec.Ports[0].Port)
		}
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	if _, err := sites.ParseGatewayAddress(addr); err != nil {
		// The other sites would refuse it: advertise none, and say why.
		return "", "the first ingress does not make a gateway address: " + err.Error()
	}
	return addr, ""
}
