package sitetrust

import "github.com/gridsync/gridsync/api/v1alpha1"

// Phases of a GridSite.
const (
	PhasePending     v1alpha1.SitePhase = "Pending"
	PhaseDiscovered  v1alpha1.SitePhase = "Discovered"
	PhaseConnecting  v1alpha1.SitePhase = "Connecting"
	PhaseActive      v1alpha1.SitePhase = "Active"
	PhaseUnreachable v1alpha1.SitePhase = "Unreachable"
	PhaseLeft        v1alpha1.SitePhase = "Left"
	// PhaseEvicted: the network's issuer evicted the site (a signed trust
	// bundle says so). No probe runs; the site is never routable until
	// the eviction is lifted.
	PhaseEvicted v1alpha1.SitePhase = "Evicted"
)

// Next is the phase an outcome leads to from current. Only a complete
// probe makes a site Active; a trust failure keeps or demotes it to
// Connecting; a connection failure demotes an Active site to Unreachable
// (where it stays until a complete probe passes) and leaves any other
// site Connecting; a site without an address is Discovered, or
// Unreachable if it was routable.
func Next(current v1alpha1.SitePhase, o Outcome) v1alpha1.SitePhase {
	wasRoutable := current == PhaseActive || current == PhaseUnreachable
	switch o.Kind {
	case Verified:
		return PhaseActive
	case ConnectionFailure:
		if wasRoutable {
			return PhaseUnreachable
		}
		return PhaseConnecting
	case AddressMissing:
		if wasRoutable {
			return PhaseUnreachable
		}
		return PhaseDiscovered
	default:
		return PhaseConnecting
	}
}
