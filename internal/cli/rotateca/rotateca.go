// Package rotateca is `gridsync-agent rotate-ca`: the issuer's operator
// rotates a network's grid CA in three stages, each written into the CA
// Secret, each waited for in the network's status before the next is
// allowed:
//
//   - add: a new CA is generated beside the one that issues (next.crt,
//     next.key); the issuer's trust bundle names both, signed by both, and
//     every site trusts both;
//   - switch: the new CA issues (tls.crt, tls.key) and the old one stays
//     trusted (previous.crt, previous.key); every site renews under the
//     new CA at once;
//   - retire: the old CA goes; the bundle names the new one alone.
//
// The CA's keys never leave the issuer's cluster: the command runs there
// with the operator's own credentials.
package rotateca

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/internal/cli/gridnet"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Stages.
const (
	StageAdd    = "add"
	StageSwitch = "switch"
	StageRetire = "retire"
)

// The CA Secret's keys of a rotation.
const (
	nextCert, nextKey         = "next.crt", "next.key"
	previousCert, previousKey = "previous.crt", "previous.key"
	caCert                    = "ca.crt"
)

// Options of one run.
type Options struct {
	Network, Stage string
	// Force skips the check that every site is ready for the stage.
	Force bool
	// Settle is how long every site must have trusted the new CA before
	// it may issue: the kubelet projects a Secret's change into the pods
	// (the gateways', the listener's) within a minute or so.
	Settle time.Duration
	// NoWait returns once the CA Secret is written.
	NoWait bool
	// Lifetime of the new CA (ten years when zero).
	Lifetime time.Duration
	Out      io.Writer
	// Poll is how often the status is read while waiting (a second when
	// zero).
	Poll time.Duration
	Now  func() time.Time
}

// Run writes the stage into the CA Secret and waits for the network's
// status to show it reached every site.
func Run(ctx context.Context, c client.Client, o Options) error {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Lifetime <= 0 {
		o.Lifetime = 10 * 365 * 24 * time.Hour
	}
	var n v1alpha1.GridNetwork
	if err := c.Get(ctx, types.NamespacedName{Name: o.Network}, &n); err != nil {
		return err
	}
	t := n.Spec.TLS
	if t == nil || t.CASecretRef == nil {
		return fmt.Errorf("network %s has no grid CA Secret (spec.tls.caSecretRef): run this at the issuer's cluster", o.Network)
	}
	if !o.Force {
		if err := ready(&n, o.Stage, o.Settle, o.Now()); err != nil {
			return err
		}
	}
	ref := types.NamespacedName{Namespace: t.CASecretRef.Namespace, Name: t.CASecretRef.Name}
	if err := write(ctx, c, ref, o); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "network %s: %s written into Secret %s\n", o.Network, o.Stage, ref)
	if o.NoWait {
		return nil
	}
	got, err := gridnet.Until(ctx, c, o.Network, o.Poll, func(n *v1alpha1.GridNetwork) bool {
		done, _ := reached(n, o.Stage)
		return done
	})
	_, say := reached(got, o.Stage)
	if err != nil {
		return fmt.Errorf("waiting for the stage to reach every site: %w (%s)", err, say)
	}
	fmt.Fprintf(o.Out, "network %s: %s\n", o.Network, say)
	return nil
}

// ready refuses a stage the sites are not ready for: switching before
// every site trusts the new CA would have some refuse the others'
// renewed certificates; retiring before every site holds a certificate
// of the new CA would drop them.
func ready(n *v1alpha1.GridNetwork, stage string, settle time.Duration, now time.Time) error {
	var r *v1alpha1.CARotationStatus
	if tb := n.Status.TrustBundle; tb != nil {
		r = tb.Rotation
	}
	switch stage {
	case StageAdd:
		return nil
	case StageSwitch:
		if r == nil || r.Stage != v1alpha1.CARotationAdded || r.SitesTrustingNewCA < r.Sites {
			return fmt.Errorf("not every site trusts the new CA yet (%s): wait, or --force", describe(r))
		}
		if r.Since != nil && now.Sub(r.Since.Time) < settle {
			return fmt.Errorf("the new CA was added %s ago: give the pods %s to load it (--settle), or --force", now.Sub(r.Since.Time).Round(time.Second), settle)
		}
	case StageRetire:
		if r == nil || r.Stage != v1alpha1.CARotationIssuing || r.SitesOnNewCA < r.Sites {
			return fmt.Errorf("not every site holds a certificate of the new CA yet (%s): wait, or --force", describe(r))
		}
	default:
		return fmt.Errorf("stage %q: add, switch or retire", stage)
	}
	return nil
}

// reached says whether the stage has reached every site, and how far it
// is.
func reached(n *v1alpha1.GridNetwork, stage string) (bool, string) {
	var r *v1alpha1.CARotationStatus
	if tb := n.Status.TrustBundle; tb != nil {
		r = tb.Rotation
	}
	if r == nil {
		return false, "the issuer has not signed the stage yet"
	}
	switch stage {
	case StageAdd:
		return r.Stage == v1alpha1.CARotationAdded && r.SitesTrustingNewCA >= r.Sites, describe(r)
	case StageSwitch:
		return r.Stage == v1alpha1.CARotationIssuing && r.SitesOnNewCA >= r.Sites, describe(r)
	default:
		return r.Stage == v1alpha1.CARotationRetired, describe(r)
	}
}

func describe(r *v1alpha1.CARotationStatus) string {
	if r == nil {
		return "no rotation under way"
	}
	return fmt.Sprintf("stage %s, new CA %s…: %d of %d sites trust it, %d hold a certificate of it", r.Stage, r.NewCA[:min(16, len(r.NewCA))], r.SitesTrustingNewCA, r.Sites, r.SitesOnNewCA)
}

// write changes the CA Secret for the stage, on the version read.
func write(ctx context.Context, c client.Client, ref types.NamespacedName, o Options) error {
	var s corev1.Secret
	if err := c.Get(ctx, ref, &s); err != nil {
		return err
	}
	d := s.Data
	switch o.Stage {
	case StageAdd:
		if len(d[nextCert]) > 0 || len(d[previousCert]) > 0 {
			return errors.New("a rotation is under way already (next.crt or previous.crt is set)")
		}
		certPEM, keyPEM, err := sitetrust.NewCA(o.Now(), o.Lifetime)
		if err != nil {
			return err
		}
		d[nextCert], d[nextKey] = certPEM, keyPEM
	case StageSwitch:
		if len(d[nextCert]) == 0 {
			return errors.New("no new CA to switch to: run the add stage first")
		}
		d[previousCert], d[previousKey] = d[corev1.TLSCertKey], d[corev1.TLSPrivateKeyKey]
		d[corev1.TLSCertKey], d[corev1.TLSPrivateKeyKey] = d[nextCert], d[nextKey]
		delete(d, nextCert)
		delete(d, nextKey)
	case StageRetire:
		if len(d[previousCert]) == 0 {
			return errors.New("no old CA to retire: run the switch stage first")
		}
		delete(d, previousCert)
		delete(d, previousKey)
		// The issuer's own configured CA becomes the new one.
		d[caCert] = d[corev1.TLSCertKey]
	default:
		return fmt.Errorf("stage %q: add, switch or retire", o.Stage)
	}
	err := c.Update(ctx, &s, client.FieldOwner("gridsync-agent-rotate-ca"))
	if apierrors.IsConflict(err) {
		return errors.New("the CA Secret changed while it was written: run the stage again")
	}
	return err
}
