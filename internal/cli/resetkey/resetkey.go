// Package resetkey is `gridsync-agent reset-site-key`: an operator of a
// site forgets, in a network without a grid CA, the key a remote site's
// records are held to there (the site lost its key, or the first key seen
// for it was not its own). It asks through the network's reset
// annotation, and waits until the agent applied it and removed it.
package resetkey

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/internal/cli/gridnet"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Options of one run.
type Options struct {
	Network, Site string
	// NoWait returns once the annotation is written.
	NoWait bool
	Out    io.Writer
	// Poll is how often the network is read while waiting (a second when
	// zero).
	Poll time.Duration
}

// Run writes the annotation and waits for the agent to apply it.
func Run(ctx context.Context, c client.Client, o Options) error {
	if err := sitetrust.ValidSiteName(o.Site); err != nil {
		return err
	}
	n, err := write(ctx, c, o)
	if err != nil {
		return err
	}
	if b := binding(n, o.Site); b != nil {
		fmt.Fprintf(o.Out, "network %s: site %s is held here to key %s (since %s)\n", o.Network, o.Site, b.Fingerprint, b.Since.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintf(o.Out, "network %s: site %s is held here to no key yet\n", o.Network, o.Site)
	}
	if o.NoWait {
		fmt.Fprintf(o.Out, "network %s: asked to reset site %s's key (%s); the agent applies it at its next reconcile\n", o.Network, o.Site, v1alpha1.ResetSiteKeyAnnotation)
		return nil
	}
	if _, err := gridnet.Until(ctx, c, o.Network, o.Poll, func(n *v1alpha1.GridNetwork) bool { return !slices.Contains(named(n), o.Site) }); err != nil {
		return fmt.Errorf("waiting for the agent to reset site %s's key in network %s: %w (is the agent of this cluster running, and leading?)", o.Site, o.Network, err)
	}
	fmt.Fprintf(o.Out, "network %s: site %s's key is reset here: the next key that signs its records is bound\n", o.Network, o.Site)
	return nil
}

// write adds the site to the annotation, on the version read: another
// writer's change is never lost.
func write(ctx context.Context, c client.Client, o Options) (*v1alpha1.GridNetwork, error) {
	n, _, err := gridnet.Change(ctx, c, o.Network, "gridsync-agent-reset-site-key", func(n *v1alpha1.GridNetwork) (bool, error) {
		if n.HasGridCA() {
			return false, fmt.Errorf("network %s has a grid CA: its sites' records are held to certificates of it, not to keys (evict a site at its issuer instead)", o.Network)
		}
		sites := named(n)
		if slices.Contains(sites, o.Site) {
			return false, nil
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[v1alpha1.ResetSiteKeyAnnotation] = strings.Join(append(sites, o.Site), ",")
		return true, nil
	})
	return n, err
}

// named are the sites the annotation names.
func named(n *v1alpha1.GridNetwork) []string {
	var out []string
	for _, s := range strings.Split(n.Annotations[v1alpha1.ResetSiteKeyAnnotation], ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func binding(n *v1alpha1.GridNetwork, site string) *v1alpha1.SiteKeyBinding {
	for i := range n.Status.SiteKeys {
		if n.Status.SiteKeys[i].Site == site {
			return &n.Status.SiteKeys[i]
		}
	}
	return nil
}
