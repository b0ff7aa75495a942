package base

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/delivery/fold"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/gossip/swimkeys"
)

// Membership is how the control plane reaches the other sites of its
// networks, declared here in its own terms (package sites) so that the
// controller neither imports nor needs the gossip layer: the agent wires
// its SWIM runtime behind it, and a test may wire anything that keeps the
// contract. Nil in Options: the agent runs without SWIM, and every network
// stays Pending.
type Membership interface {
	// SetNetworkKeys installs a network's SWIM keys (nil: the network has
	// none; failed: its key Secret did not load, so it is held).
	SetNetworkKeys(network string, ks *swimkeys.Set, failed bool)
	// AnnounceSeeds joins a network's resolved seeds; RejoinSeeds joins
	// the last announced ones again.
	AnnounceSeeds(network string, addrs []string) sites.SeedResult
	RejoinSeeds(network string) sites.SeedResult
	// SetIdentity says how a network's records are signed and checked;
	// called before Publish, and again whenever the grid CA or the site
	// certificate changes (a renewed certificate re-signs this site's
	// records).
	SetIdentity(network string, id sites.Identity)
	// SetNetworkSettings says what the network's spec asks of membership:
	// a pinned grid ID, the site's region and zone, SWIM timings.
	SetNetworkSettings(network string, s sites.NetworkSettings)
	// Publish announces this site's record of a network: its certificate
	// and its providers.
	Publish(network, certPEM string, providers []sites.Provider) error
	// PublishSignals gossips this site's provider signals (signalTransport
	// gossip).
	PublishSignals(network string, signals []sites.Signal) error
	// ResetSiteKey forgets, in a network without a grid CA, the key a
	// remote site's records are held to (and what is held of the site):
	// the next key to sign its records is bound. It reports whether the
	// site was held to a key.
	ResetSiteKey(network, site string) bool
	// Forget withdraws this site from a network.
	Forget(network string)
	// View is what is known of a network's other sites.
	View(network string) sites.NetworkView
	// OnChange is called with a network's name whenever its view changes.
	OnChange(fn func(network string))
}

// DeliveryTracker holds what gateway pods report they deliver.
type DeliveryTracker interface {
	// SetGateways names a network's gateways (nil: the network is gone).
	SetGateways(network string, gateways []types.NamespacedName)
	// Summary is a gateway's delivery against its rendered revision, nil
	// while none of its pods reports.
	Summary(namespace, gateway, rendered string, renderedAt time.Time) *v1alpha1.GatewayDelivery
	// OnChange registers who is told a network's summary may have changed.
	OnChange(func(network string))
	// Readers is what a gateway's reporting pods read of its overlay
	// ConfigMap and ask for (its form and size bound).
	Readers(namespace, gateway string) fold.Readers
	// OnReadersChange registers who is told that what a network's gateway
	// pods read or ask for changed.
	OnReadersChange(func(network string))
}
