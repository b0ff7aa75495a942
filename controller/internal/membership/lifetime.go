package membership

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/trust/enrol"
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

// SiteLifetimes hands out each network's CA, as issuer answers it, with
// the lifetime of the network's certificates (SiteLifetime, none
// explicit) as the CA's default: what an enrolment or renewal is issued
// for when the enrolment server is given no lifetime of its own. It reads
// the GridNetwork uncached, by name, after issuer found the network is
// issued for here.
func SiteLifetimes(issuer enrol.CA, api client.Reader) enrol.CA {
	return siteLifetimes{issuer: issuer, api: api}
}

type siteLifetimes struct {
	issuer enrol.CA
	api    client.Reader
}

func (s siteLifetimes) Authority(ctx context.Context, name string) (*sitetrust.CA, []string, error) {
	ca, refused, err := s.issuer.Authority(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	var network v1alpha1.GridNetwork
	if err := s.api.Get(ctx, types.NamespacedName{Name: name}, &network); err != nil {
		return nil, nil, fmt.Errorf("network %s is not issued for here", name)
	}
	return ca.WithSiteLifetime(SiteLifetime(&network, 0)), refused, nil
}
