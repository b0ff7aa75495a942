package v1alpha1

import (
	kjson "sigs.k8s.io/json"
)

// Upstream's earlier releases spell several fields differently
// (gatewayRefs, localSiteName, consumerConfig.enabled, credentialMountBase,
// swimKeyRef, egress, routingClusterRef, auth.manual, metricsEndpoint) and
// write peerTrust.mode pin. The schema accepts both spellings and refuses
// the two set to different values (CEL); decoding an object folds the
// other spelling into the one the agent reads, here and nowhere else, so
// that no code path can act on half of a manifest.

// UnmarshalJSON decodes a GridNetwork and folds its fields' other names
// into the ones the agent reads.
func (n *GridNetwork) UnmarshalJSON(b []byte) error {
	type plain GridNetwork
	if err := kjson.UnmarshalCaseSensitivePreserveInts(b, (*plain)(n)); err != nil {
		return err
	}
	n.Spec.Normalize()
	return nil
}

// UnmarshalJSON decodes an InferenceProvider and folds its fields' other
// names into the ones the agent reads.
func (p *InferenceProvider) UnmarshalJSON(b []byte) error {
	type plain InferenceProvider
	if err := kjson.UnmarshalCaseSensitivePreserveInts(b, (*plain)(p)); err != nil {
		return err
	}
	p.Spec.Normalize()
	return nil
}

// UnmarshalJSON decodes a GridSite and folds its fields' other names into
// the ones the agent reads.
func (s *GridSite) UnmarshalJSON(b []byte) error {
	type plain GridSite
	if err := kjson.UnmarshalCaseSensitivePreserveInts(b, (*plain)(s)); err != nil {
		return err
	}
	s.Spec.Normalize()
	return nil
}

// PeerTrustPinned is the pinned trust mode; upstream writes it pin.
const PeerTrustPinned = "pinned"

// Normalize moves every field written under its other name to the name
// the agent reads and clears the other. The API server has refused a
// spec that sets both to different values, so nothing is lost.
func (s *GridNetworkSpec) Normalize() {
	if len(s.ConsumerGateways) == 0 {
		s.ConsumerGateways = s.GatewayRefs
	}
	s.GatewayRefs = nil
	for i := range s.ConsumerGateways {
		g := &s.ConsumerGateways[i]
		g.SiteName = or(g.SiteName, g.LocalSiteName)
		g.LocalSiteName = ""
		if g.PraxisConfig == nil {
			g.PraxisConfig = g.ConsumerConfig
		}
		g.ConsumerConfig = nil
		if pc := g.PraxisConfig; pc != nil {
			pc.Generate = pc.Generate || pc.Enabled
			pc.Enabled = false
			pc.CredentialMountPath = or(pc.CredentialMountPath, pc.CredentialMountBase)
			pc.CredentialMountBase = ""
		}
	}
	if t := s.TLS; t != nil {
		if t.SwimKeySecretRef == nil {
			t.SwimKeySecretRef = t.SwimKeyRef
		}
		t.SwimKeyRef = nil
	}
	if pt := s.PeerTrust; pt != nil && pt.Mode == "pin" {
		pt.Mode = PeerTrustPinned
	}
}

// Normalize moves every field written under its other name to the name
// the agent reads and clears the other.
func (s *InferenceProviderSpec) Normalize() {
	s.ClusterName = or(s.ClusterName, s.RoutingClusterRef)
	s.RoutingClusterRef = ""
	if a := s.Auth; a != nil {
		a.CredentialsManagedExternally = a.CredentialsManagedExternally || a.Manual
		a.Manual = false
	}
	if m := s.MetricsConfig; m != nil {
		m.MetricsEndpoint = or(m.MetricsEndpoint, m.Endpoint)
		m.Endpoint = ""
	}
}

// Normalize moves every field written under its other name to the name
// the agent reads and clears the other.
func (s *GridSiteSpec) Normalize() {
	if s.GatewayEndpoint == nil {
		s.GatewayEndpoint = s.Egress
	}
	s.Egress = nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
