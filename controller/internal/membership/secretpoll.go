package membership

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// SecretPoller is the runnable that polls the networks' Secrets (see
// secretPoller); it sends the networks to reconcile to out.
func (r *Member) SecretPoller(out chan<- event.GenericEvent) manager.Runnable {
	return &secretPoller{r: r, out: out}
}

// secretPoller reads the networks' SWIM key and trust Secrets every
// SwimKeyPollInterval (the agent gets Secrets, it does not watch them).
// A SWIM key Secret that changed has its network reconciled: that is how
// the steps of a key rotation are followed without a restart. Trust
// material (the grid CA, the site certificate) that changed has the
// network reconciled (a deleted site Secret is issued again) and its
// sites probed again.
type secretPoller struct {
	r    *Member
	out  chan<- event.GenericEvent
	last map[string][32]byte
}

// NeedLeaderElection: only the leader runs membership and probes.
func (p *secretPoller) NeedLeaderElection() bool { return true }

func (p *secretPoller) Start(ctx context.Context) error {
	p.last = map[string][32]byte{}
	t := time.NewTicker(p.r.Opts.SwimKeyPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.poll(ctx)
		}
	}
}

func (p *secretPoller) poll(ctx context.Context) {
	var list v1alpha1.GridNetworkList
	if err := p.r.Client.List(ctx, &list); err != nil {
		return
	}
	if p.r.Opts.Membership == nil {
		// Without gossip, the trust bundles come from the issuers: fetched
		// (each bounded by the probe timeout, the networks at once) after
		// the Secret reads, so that a slow issuer delays no key.
		defer p.fetchBundles(ctx, list.Items)
	}
	for i := range list.Items {
		n := &list.Items[i]
		if n.Spec.TLS == nil || !n.DeletionTimestamp.IsZero() {
			continue
		}
		if n.Spec.TLS.CASecretRef != nil || n.Spec.TLS.CAConfigMapRef != nil || n.Spec.TLS.SiteSecretRef != nil {
			p.r.Trust.Refresh(ctx, n) // reports a change itself
		}
		if n.Spec.TLS.SwimKeySecretRef == nil || p.r.Opts.Membership == nil {
			continue
		}
		ks, reason, err := p.r.loadSwimKey(ctx, n)
		// A digest of what was read: keys are compared, never kept here
		// or logged.
		h := sha256.New()
		if err != nil {
			h.Write([]byte(reason))
		} else {
			for _, k := range ks.All() {
				h.Write(k)
			}
		}
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		prev, seen := p.last[n.Name]
		p.last[n.Name] = sum
		if seen && prev != sum {
			p.r.Opts.Logger.Info("swim_key_secret_changed", "network", n.Name)
			select {
			case p.out <- event.GenericEvent{Object: &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// fetchBundles fetches each enrolled network's trust bundle from its
// issuer, the networks at once, and waits for them.
func (p *secretPoller) fetchBundles(ctx context.Context, networks []v1alpha1.GridNetwork) {
	e := &Evictions{Env: p.r.Env, Trust: p.r.Trust} // holds no state of its own: the bundles are in the book
	var wg sync.WaitGroup
	for i := range networks {
		n := &networks[i]
		if n.Spec.TLS == nil || !n.DeletionTimestamp.IsZero() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.fetchFromIssuer(ctx, n)
		}()
	}
	wg.Wait()
}
