package membership

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

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
	memo := s.GatewayAddress + "\x00" + s.Region + "\x00" + s.Zone
	if r.gridSites.seen(name, memo) {
		return nil
	}
	spec := map[string]any{"gridNetworkRef": network}
	if s.GatewayAddress != "" {
		spec["gatewayEndpoint"] = map[string]any{"address": s.GatewayAddress}
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
