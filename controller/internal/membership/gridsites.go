package membership

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/shared/envelope"
)

// AutoDiscoverSitesLabel asks for GridSites of discovered sites.
const AutoDiscoverSitesLabel = "grid.praxis.fast/auto-discover-sites"

// GridSite management: one GridSite per remote site of a network that
// carries the auto-discover label, named as the reference names them.
// The agent writes the spec's network and gateway address (server-side
// apply: pins and server name are the user's); a departed site is never
// deleted.

// gridSiteName is "<network>-<site>", lowercased, other characters as
// dashes, dashes trimmed at the ends.
func gridSiteName(network, site string) string {
	clean := func(s string) string {
		b := []byte(strings.ToLower(s))
		for i, c := range b {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
				b[i] = '-'
			}
		}
		return strings.Trim(string(b), "-")
	}
	name := strings.Trim(clean(network)+"-"+clean(site), "-")
	if name == "" {
		return "discovered-site"
	}
	if len(name) > 253 {
		sum := sha256.Sum256([]byte(name))
		name = name[:236] + "-" + hex.EncodeToString(sum[:8])
	}
	return name
}

// SyncGridSites creates the GridSites of the network's remote sites and
// keeps their gateway address, writing only what changed since the last
// write. Their status is the GridSite controller's.
func (r *Member) SyncGridSites(ctx context.Context, network *v1alpha1.GridNetwork, view sites.NetworkView) error {
	if network.Labels[AutoDiscoverSitesLabel] != "true" {
		return nil
	}
	r.RanStage(base.StageGridSites)
	var firstErr error
	for _, s := range view.Sites {
		if err := r.syncGridSite(ctx, network.Name, s); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func (r *Member) syncGridSite(ctx context.Context, network string, s sites.Site) error {
	name := gridSiteName(network, s.Name)
	// The generation is part of what was decided on: an advertisement kept
	// back as not newer must be looked at again when the same address is
	// signed at a higher generation.
	memo := fmt.Sprint(s.GatewayAddress, "\x00", s.GatewayGeneration, "\x00", s.GatewayInvalid, "\x00", s.Region, "\x00", s.Zone)
	if r.gridSites.seen(name, memo) {
		return nil
	}
	var current v1alpha1.GridSite
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &current); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read GridSite %s: %w", name, err)
	}
	spec := map[string]any{"gridNetworkRef": network}
	endpoint, replaced := advertisedEndpoint(current.Spec.GatewayEndpoint, s)
	if endpoint != nil {
		spec["gatewayEndpoint"] = endpoint
	}
	if !replaced {
		r.Opts.Logger.Info("gridsite_endpoint_kept", "gridsite", name, "site", s.Name, "invalid", s.GatewayInvalid,
			"advertised_generation", s.GatewayGeneration, "why", "the advertisement is ambiguous or malformed, or not newer than the GridSite's endpoint")
	}
	// Where the site runs, as it signed it into its records.
	if s.Region != "" {
		spec["region"] = s.Region
	}
	if s.Zone != "" {
		spec["zone"] = s.Zone
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "GridSite",
		"metadata": map[string]any{"name": name, "labels": map[string]any{
			envelope.LabelManagedBy: r.Opts.Producer, envelope.LabelNetwork: network, v1alpha1.SiteLabel: s.Name,
		}},
		"spec": spec,
	}}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(r.Opts.Producer), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply GridSite %s: %w", name, err)
	}
	r.gridSites.remember(name, memo)
	return nil
}

// advertisedEndpoint is what the agent writes of a site's gateway
// endpoint (address, host, port, generation; tls and the rest are the
// user's), nil for none, and whether it is the site's advertisement. The
// advertisement replaces the GridSite's endpoint only when it is newer:
// a replica whose view is behind, or an advertisement older than an
// endpoint written by hand with a greater generation, never takes a
// newer endpoint back. An ambiguous or malformed advertisement replaces
// nothing: the endpoint the probe verifies stays.
func advertisedEndpoint(current *v1alpha1.GatewayEndpoint, s sites.Site) (map[string]any, bool) {
	var have sites.Endpoint
	var generation int64
	if current != nil {
		generation = current.Generation
		if ep, err := base.GatewayEndpointOf(current); err == nil {
			have = ep.Endpoint
		}
	}
	keep := func() map[string]any {
		if current == nil || current.Address == "" && current.Host == "" {
			return nil
		}
		out := map[string]any{}
		if current.Address != "" {
			out["address"] = current.Address
		}
		if current.Host != "" {
			out["host"], out["port"] = current.Host, int64(current.Port)
		}
		if current.Generation > 0 {
			out["generation"] = current.Generation
		}
		return out
	}
	advertised := int64(min(s.GatewayGeneration, math.MaxInt64))
	switch {
	case s.GatewayInvalid:
		return keep(), false
	case s.GatewayAddress != "" && s.GatewayAddress == have.Address():
		// The same endpoint, signed again: its generation stays.
		if generation > 0 {
			advertised = generation
		}
	case advertised <= generation:
		return keep(), false
	case s.GatewayAddress == "":
		return nil, true // withdrawn, by a newer record
	}
	ep, err := sites.ParseGatewayAddress(s.GatewayAddress)
	if err != nil { // the view holds parsed addresses only
		return keep(), false
	}
	return map[string]any{"address": ep.Address(), "host": ep.Host, "port": int64(ep.Port), "generation": advertised}, true
}

// writeMemo remembers what was last written per object, so that an idle
// reconcile writes nothing.
type writeMemo struct {
	mu   sync.Mutex
	last map[string]string
}

func (m *writeMemo) seen(name, memo string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last[name] == memo
}

func (m *writeMemo) remember(name, memo string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		m.last = map[string]string{}
	}
	m.last[name] = memo
}
