package membership

import (
	"time"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// SiteLifetime is how long the site certificates issued for network live:
// explicit (the agent's --site-cert-lifetime) when set; otherwise a day
// (sitetrust.DefaultSiteLifetime) in SPIFFE mode, where a renewal changes
// nothing another site checks, and 90 days
// (sitetrust.PinnedSiteLifetime) in pinned mode, where the other sites'
// GridSites pin the leaf's SHA-256 and every renewal changes it.
func SiteLifetime(network *v1alpha1.GridNetwork, explicit time.Duration) time.Duration {
	switch {
	case explicit > 0:
		return explicit
	case base.SpiffeMode(network):
		return sitetrust.DefaultSiteLifetime
	default:
		return sitetrust.PinnedSiteLifetime
	}
}
