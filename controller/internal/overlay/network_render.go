package overlay

import (
	"time"

	"github.com/gridsync/gridsync/controller/render"
	"github.com/gridsync/gridsync/shared/envelope"
)

// gatewayOverlay is one gateway's overlay on its way to publication.
type gatewayOverlay struct {
	gateway render.Gateway
	overlay envelope.Overlay
	// renderTime is how long rendering took (a metric).
	renderTime time.Duration
	// hold keeps this revision from the ConfigMap, and says why: its
	// generated consumer config is not applied yet (the consumer config
	// stage), or its delegated Deployment cannot be read (the mount
	// stage). nil publishes it.
	hold *overlayHold
}

// overlayHold is why an overlay revision is kept from its gateway: the
// status entry's reason, and why the revision waits.
type overlayHold struct {
	reason string
	why    string
}

// renderOverlays is the render stage: one overlay per gateway, from this
// site's assessed providers and the trusted remote ones. Pure: the same
// inputs give the same overlays and revisions.
func renderOverlays(network string, gws []render.Gateway, local []render.Provider, remote []render.Remote) []gatewayOverlay {
	out := make([]gatewayOverlay, 0, len(gws))
	for _, gw := range gws {
		start := time.Now()
		o := render.Overlay(network, gw, local, remote...)
		out = append(out, gatewayOverlay{gateway: gw, overlay: o, renderTime: time.Since(start)})
	}
	return out
}
