// Package evict is `gridsync-agent evict`: an operator at the issuing site
// evicts a site from a network (or lifts its eviction) by listing it in
// the network's spec.tls.siteCertificate.evictedSites, then waits until
// the issuer has signed the network's trust bundle with it.
package evict

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/internal/cli/gridnet"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Options of one run.
type Options struct {
	Network, Site string
	// Lift removes the site from the list instead: it comes back only by
	// enrolling again, with a new token.
	Lift bool
	// NoWait returns once the spec is written, without waiting for the
	// issuer's signature.
	NoWait bool
	Out    io.Writer
	// Poll is how often the status is read while waiting (a second when
	// zero).
	Poll time.Duration
}

// Run writes the spec and waits for the signed bundle.
func Run(ctx context.Context, c client.Client, o Options) error {
	if err := sitetrust.ValidSiteName(o.Site); err != nil {
		return err
	}
	changed, err := write(ctx, c, o)
	if err != nil {
		return err
	}
	verb := "evicted"
	if o.Lift {
		verb = "lifted the eviction of"
	}
	if !changed {
		fmt.Fprintf(o.Out, "network %s: site %s already %s\n", o.Network, o.Site, map[bool]string{false: "evicted", true: "not evicted"}[o.Lift])
	}
	if o.NoWait {
		fmt.Fprintf(o.Out, "network %s: %s site %s in the spec; the issuer signs it at its next reconcile\n", o.Network, verb, o.Site)
		return nil
	}
	n, err := gridnet.Until(ctx, c, o.Network, o.Poll, func(n *v1alpha1.GridNetwork) bool {
		tb := n.Status.TrustBundle
		return tb != nil && slices.Contains(tb.EvictedSites, o.Site) != o.Lift || o.Lift && tb == nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the issuer to sign network %s's trust bundle: %w (is this the issuer's cluster? the network's Evictions condition says why)", o.Network, err)
	}
	if tb := n.Status.TrustBundle; tb != nil {
		fmt.Fprintf(o.Out, "network %s: %s site %s (trust bundle version %s, %d site(s) evicted)\n", o.Network, verb, o.Site, tb.Version, len(tb.EvictedSites))
	} else {
		fmt.Fprintf(o.Out, "network %s: no trust bundle; site %s is not evicted\n", o.Network, o.Site)
	}
	return nil
}

// write lists or unlists the site in the spec, with the object's resource
// version: another writer's change is never lost.
func write(ctx context.Context, c client.Client, o Options) (bool, error) {
	_, changed, err := gridnet.Change(ctx, c, o.Network, "gridsync-agent-evict", func(n *v1alpha1.GridNetwork) (bool, error) {
		t := n.Spec.TLS
		if t == nil || t.CASecretRef == nil {
			return false, fmt.Errorf("network %s has no grid CA (spec.tls.caSecretRef): a site can be evicted only by the issuer of a network with one", o.Network)
		}
		if t.SiteCertificate == nil || t.SiteCertificate.Mode == "" {
			// Unset, the mode is issuer only where the CA's key is.
			if _, err := gridnet.CASecretWithKey(ctx, c, t.CASecretRef); err != nil {
				return false, fmt.Errorf("network %s: %w: evict the site at the issuing site's cluster", o.Network, err)
			}
			if t.SiteCertificate == nil {
				t.SiteCertificate = &v1alpha1.SiteCertificate{}
			}
			t.SiteCertificate.Mode = v1alpha1.SiteCertificateIssuer
		}
		sc := t.SiteCertificate
		if sc.Mode == v1alpha1.SiteCertificateEnrolled || sc.Mode == v1alpha1.SiteCertificateProvided {
			return false, fmt.Errorf("network %s is %s here, not the issuer: evict the site at the issuing site's cluster", o.Network, sc.Mode)
		}
		listed := slices.Contains(sc.EvictedSites, o.Site)
		switch {
		case o.Lift == !listed:
			return false, nil
		case o.Lift:
			sc.EvictedSites = slices.DeleteFunc(sc.EvictedSites, func(s string) bool { return s == o.Site })
		default:
			sc.EvictedSites = append(sc.EvictedSites, o.Site)
			slices.Sort(sc.EvictedSites)
		}
		return true, nil
	})
	return changed, err
}
