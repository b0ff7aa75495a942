// The clusters a config names: explicit clusterEndpoints with their
// transport checked, or derived from the providers' URLs.

package praxisconfig

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

const (
	modeMutualTLS = "mutual_tls"
	modeTLS       = "tls"
	modePlaintext = "plaintext"
)

// explicitEndpoints validates every clusterEndpoints entry, used by a
// candidate or not: every one is rendered (an inactive provider's is kept
// for its restoration).
func explicitEndpoints(entries []v1alpha1.ClusterEndpoint) ([]endpoint, error) {
	seen := map[string]bool{}
	out := make([]endpoint, 0, len(entries))
	for _, ep := range entries {
		name := strings.TrimSpace(ep.Cluster)
		if name == "" {
			return nil, fail(ReasonPraxisConfigRenderFailed, "a clusterEndpoints entry has a blank cluster")
		}
		if seen[name] {
			return nil, fail(ReasonPraxisConfigRenderFailed, "cluster %s has two clusterEndpoints entries", name)
		}
		seen[name] = true
		if ep.Transport == nil {
			return nil, fail(ReasonMissingTransport, "cluster endpoint %s has no transport: declare mode mutual_tls or tls (with sni) or plaintext", name)
		}
		t := *ep.Transport
		if err := checkTransport(name, t); err != nil {
			return nil, err
		}
		if err := checkAddress(name, ep.Address); err != nil {
			return nil, err
		}
		out = append(out, endpoint{cluster: name, address: ep.Address, transport: t})
	}
	return out, nil
}

func checkTransport(cluster string, t v1alpha1.EndpointTransport) error {
	sni := ""
	if t.SNI != nil {
		sni = strings.TrimSpace(*t.SNI)
	}
	switch t.Mode {
	case modeMutualTLS, modeTLS:
		if sni == "" {
			return fail(ReasonMissingSni, "%s cluster endpoint %s has no sni: set the name in the server certificate's subject alternative names", t.Mode, cluster)
		}
		if t.Mode == modeMutualTLS && t.CASecretRef != nil {
			return fail(ReasonPraxisConfigRenderFailed, "mutual_tls cluster endpoint %s sets caSecretRef: mutual TLS verifies against the grid CA", cluster)
		}
	case modePlaintext:
		if sni != "" {
			return fail(ReasonPlaintextWithSni, "plaintext cluster endpoint %s sets sni, which does not enable TLS: use mode mutual_tls or tls, or remove sni", cluster)
		}
		if t.CASecretRef != nil {
			return fail(ReasonPraxisConfigRenderFailed, "plaintext cluster endpoint %s sets caSecretRef", cluster)
		}
	default:
		return fail(ReasonMissingTransport, "cluster endpoint %s has transport mode %q: use mutual_tls, tls or plaintext", cluster, t.Mode)
	}
	if ca := t.CASecretRef; ca != nil && (strings.TrimSpace(ca.Name) == "" || !validKey(caKey(ca))) {
		return fail(ReasonPraxisConfigRenderFailed, "cluster endpoint %s has an incomplete caSecretRef", cluster)
	}
	return nil
}

// checkAddress accepts host:port with a port from 1 to 65535.
func checkAddress(cluster, address string) error {
	host, port, err := net.SplitHostPort(address)
	if err == nil && host != "" {
		if n, perr := strconv.Atoi(port); perr == nil && n > 0 && n < 65536 {
			return nil
		}
	}
	return fail(ReasonPraxisConfigRenderFailed, "cluster endpoint %s has address %q: want host:port", cluster, address)
}

// deriveEndpoints fills endpoints for the allowlisted local providers that
// have no explicit entry, whatever their phase (a provider kept for its
// restoration keeps its endpoint). It returns, per routing identity that
// could not be derived, why.
func deriveEndpoints(dt *v1alpha1.DeriveTopology, providers []Provider, explicit []endpoint) ([]endpoint, map[string]string, error) {
	notDerived := map[string]string{}
	if dt == nil || len(dt.FromProviders) == 0 {
		return nil, notDerived, nil
	}
	if dt.Transport != nil {
		if dt.Transport.Mode != modeTLS {
			return nil, nil, fail(ReasonPraxisConfigRenderFailed, "deriveTopology.transport.mode is %q: it must be tls", dt.Transport.Mode)
		}
		if err := checkTransport("deriveTopology.transport", *dt.Transport); err != nil {
			return nil, nil, err
		}
	}
	hasExplicit := map[string]bool{}
	for _, e := range explicit {
		hasExplicit[e.cluster] = true
	}
	allowed := map[string]bool{}
	for _, id := range dt.FromProviders {
		allowed[id] = true
	}
	byID := map[string]endpoint{}
	for _, p := range slices.SortedFunc(slices.Values(providers), func(a, b Provider) int { return cmp.Compare(a.Name, b.Name) }) {
		if !allowed[p.Identity] || hasExplicit[p.Identity] || notDerived[p.Identity] != "" {
			continue
		}
		e, why := derive(p, dt.Transport)
		if why != "" {
			notDerived[p.Identity] = why
			delete(byID, p.Identity)
			continue
		}
		if prev, ok := byID[p.Identity]; ok && (prev.address != e.address || prev.transport.Mode != e.transport.Mode) {
			notDerived[p.Identity] = fmt.Sprintf("providers sharing routing identity %s declare different endpoints", p.Identity)
			delete(byID, p.Identity)
			continue
		}
		byID[p.Identity] = e
	}
	out := make([]endpoint, 0, len(byID))
	for _, e := range byID {
		out = append(out, e)
	}
	return out, notDerived, nil
}

// derive makes a provider's endpoint from its URL: https takes
// deriveTopology.transport. An http URL is never derived: plaintext is an
// explicit, dev-only choice of the gateway's owner (a clusterEndpoints
// entry with transport.mode plaintext), and a provider's URL is written
// by whoever may write providers.
func derive(p Provider, tls *v1alpha1.EndpointTransport) (endpoint, string) {
	u, err := url.Parse(p.Endpoint)
	if err != nil || u.Hostname() == "" {
		return endpoint{}, fmt.Sprintf("provider %s's endpoint is not a URL with a host", p.Name)
	}
	port := u.Port()
	e := endpoint{cluster: p.Identity}
	switch u.Scheme {
	case "http":
		return endpoint{}, fmt.Sprintf("provider %s's endpoint is plain http: plaintext is never derived; add a clusterEndpoints entry with transport.mode plaintext to route to it", p.Name)
	case "https":
		if tls == nil {
			return endpoint{}, fmt.Sprintf("provider %s's endpoint is https and deriveTopology.transport is not set", p.Name)
		}
		if port == "" {
			port = "443"
		}
		e.transport = *tls
	default:
		return endpoint{}, fmt.Sprintf("provider %s's endpoint scheme %q is neither http nor https", p.Name, u.Scheme)
	}
	e.address = net.JoinHostPort(u.Hostname(), port)
	return e, ""
}

// renderCluster is one load_balancer cluster, and the Secret files it
// reads.
func renderCluster(e endpoint, tlsDir string, in Input, reqs *requirements) lbCluster {
	c := lbCluster{Name: e.cluster, Endpoints: []string{e.address}}
	sni := ""
	if e.transport.SNI != nil {
		sni = strings.TrimSpace(*e.transport.SNI)
	}
	switch e.transport.Mode {
	case modeMutualTLS:
		c.TLS = &clusterTLS{
			CA:         &tlsCA{CAPath: path.Join(tlsDir, "ca.crt")},
			ClientCert: &tlsClientCert{CertPath: path.Join(tlsDir, "tls.crt"), KeyPath: path.Join(tlsDir, "tls.key")},
			SNI:        sni, Verify: true,
		}
		if in.GridCA != nil {
			reqs.add(PurposeGridPeerCA, in.GridCA.Namespace, in.GridCA.Name, "ca.crt", path.Join(tlsDir, "ca.crt"))
		}
		if in.Site != nil {
			reqs.add(PurposeGridSiteIdentity, in.Site.Namespace, in.Site.Name, "tls.crt", path.Join(tlsDir, "tls.crt"))
			reqs.add(PurposeGridSiteIdentity, in.Site.Namespace, in.Site.Name, "tls.key", path.Join(tlsDir, "tls.key"))
		}
	case modeTLS:
		c.TLS = &clusterTLS{SNI: sni, Verify: true}
		if ca := e.transport.CASecretRef; ca != nil {
			p := path.Join(BackendCAMountPath, ca.Name, caKey(ca))
			c.TLS.CA = &tlsCA{CAPath: p}
			// The reference: a tls endpoint's CA Secret is local to the
			// gateway's namespace.
			reqs.add(PurposeBackendCA, in.Namespace, ca.Name, caKey(ca), p)
		}
	}
	return c
}

func caKey(ca *v1alpha1.LocalSecretKeyRef) string {
	if ca.Key == "" {
		return "ca.crt"
	}
	return ca.Key
}
