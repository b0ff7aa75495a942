// Package service points the site's SWIM Service at the replica that
// leads. Only the leader is the site's member; a Service that selected
// every ready replica would send peers' packets to a standby that does not
// listen. The Service has no selector: the leader writes its one
// EndpointSlice, and the next leader overwrites it.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Publisher writes the EndpointSlice of the SWIM Service.
type Publisher struct {
	Client    client.Client
	Namespace string
	// Service is the SWIM Service's name; the slice is named after it.
	Service string
	// PodIP is this replica's address; Port the SWIM port (UDP and TCP).
	PodIP string
	Port  int32
	// PortPrefix names the slice's ports <prefix>-udp and <prefix>-tcp;
	// "swim" when empty. The signals Service is published the same way.
	PortPrefix string
	Manager    string // field manager and managed-by label
	Logger     *slog.Logger
}

// NeedLeaderElection: the slice names the leader.
func (p *Publisher) NeedLeaderElection() bool { return true }

// Start writes the slice once leading, then waits for the end.
func (p *Publisher) Start(ctx context.Context) error {
	if err := p.Publish(ctx); err != nil {
		// Not fatal: peers that reach the pod address still join.
		p.Logger.Error("service_endpoints_failed", "service", p.Namespace+"/"+p.Service, "error", err)
	}
	<-ctx.Done()
	return nil
}

// Publish applies the slice that names this replica.
func (p *Publisher) Publish(ctx context.Context) error {
	ip, err := netip.ParseAddr(p.PodIP)
	if err != nil {
		return fmt.Errorf("pod IP %q: %w", p.PodIP, err)
	}
	family := discoveryv1.AddressTypeIPv4
	if ip.Unmap().Is6() {
		family = discoveryv1.AddressTypeIPv6
	}
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	prefix := p.PortPrefix
	if prefix == "" {
		prefix = "swim"
	}
	slice := discoveryv1ac.EndpointSlice(p.Service, p.Namespace).
		WithLabels(map[string]string{
			discoveryv1.LabelServiceName: p.Service,
			discoveryv1.LabelManagedBy:   p.Manager,
		}).
		WithAddressType(family).
		WithEndpoints(discoveryv1ac.Endpoint().
			WithAddresses(ip.Unmap().String()).
			WithConditions(discoveryv1ac.EndpointConditions().WithReady(true))).
		WithPorts(
			discoveryv1ac.EndpointPort().WithName(prefix+"-udp").WithProtocol(udp).WithPort(p.Port),
			discoveryv1ac.EndpointPort().WithName(prefix+"-tcp").WithProtocol(tcp).WithPort(p.Port),
		)
	if err := p.Client.Apply(ctx, slice, client.FieldOwner(p.Manager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply EndpointSlice %s/%s: %w", p.Namespace, p.Service, err)
	}
	p.Logger.Info(prefix+"_endpoints_published", "service", p.Namespace+"/"+p.Service, "address", ip.String(), "port", p.Port)
	return nil
}
