// Package infracert is `gridsync-agent issue-infra-cert`: an operator at
// the issuing site has the grid CA sign an infrastructure certificate,
// for a database or a serving listener that shares the grid's trust, into
// a Secret. As the reference describes it, the certificate carries no
// organization and no SPIFFE SAN: it names no site, so it matches no
// site wherever a site is checked (the signals listener reads its caller
// as anonymous, a site probe refuses it).
package infracert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/internal/cli/gridnet"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Label marks a Secret this command wrote: it rewrites no other (a
// site's certificate Secret, the grid CA's).
const Label = "grid.praxis.fast/certificate"

// LabelValue is Label's value on an infrastructure certificate's Secret.
const LabelValue = "infrastructure"

// Options of one run.
type Options struct {
	// Network names the GridNetwork whose grid CA signs.
	Network string
	// DNSNames are the certificate's names; the first is its subject.
	DNSNames []string
	// Secret is where the certificate goes: tls.crt (leaf then CA),
	// tls.key and ca.crt, type kubernetes.io/tls.
	Secret types.NamespacedName
	// Lifetime is the certificate's (sitetrust.DefaultInfrastructureLifetime
	// when zero).
	Lifetime time.Duration
	Out      io.Writer
	// Now is the issuing time (time.Now when nil).
	Now func() time.Time
}

// Run signs the certificate and writes its Secret.
func Run(ctx context.Context, c client.Client, o Options) error {
	if err := sitetrust.ValidInfrastructureNames(o.DNSNames); err != nil {
		return err
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	ca, err := loadCA(ctx, c, o.Network)
	if err != nil {
		return err
	}
	chain, key, err := ca.IssueInfrastructure(o.DNSNames, now(), o.Lifetime)
	if err != nil {
		return err
	}
	data := map[string][]byte{
		corev1.TLSCertKey:       chain,
		corev1.TLSPrivateKeyKey: key,
		"ca.crt":                sitetrust.EncodeCertificate(ca.Cert),
	}
	if err := write(ctx, c, o.Secret, data); err != nil {
		return err
	}
	leaf, err := sitetrust.ParseCertificates(chain)
	if err != nil {
		return err
	}
	// The key stays in the Secret: what is printed is public.
	fmt.Fprintf(o.Out, "issued an infrastructure certificate of network %s's grid CA into Secret %s: DNS %v, no organization, no SPIFFE ID (it names no site), valid until %s, sha256 %s\n",
		o.Network, o.Secret, o.DNSNames, leaf[0].NotAfter.UTC().Format(time.RFC3339), sitetrust.Fingerprint(leaf[0].Raw))
	return nil
}

// loadCA reads the network's grid CA, with its key: this runs only in
// the issuer's cluster.
func loadCA(ctx context.Context, c client.Client, network string) (*sitetrust.CA, error) {
	var n v1alpha1.GridNetwork
	if err := c.Get(ctx, types.NamespacedName{Name: network}, &n); err != nil {
		return nil, fmt.Errorf("network %s: %w", network, err)
	}
	t := n.Spec.TLS
	if t == nil || t.CASecretRef == nil {
		return nil, fmt.Errorf("network %s has no grid CA Secret (spec.tls.caSecretRef): an infrastructure certificate is issued by the grid CA, at the issuing site", network)
	}
	s, err := gridnet.CASecretWithKey(ctx, c, t.CASecretRef)
	if err != nil {
		return nil, fmt.Errorf("network %s: %w: issue the certificate at the issuing site's cluster", network, err)
	}
	ca, err := sitetrust.ParseCA(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("network %s: the grid CA Secret %s/%s: %w", network, s.Namespace, s.Name, err)
	}
	return ca, nil
}

// errNotOurs refuses to overwrite a Secret this command did not write.
var errNotOurs = errors.New("exists and is not an infrastructure certificate's Secret (no label " + Label + "=" + LabelValue + "): it is left alone; name another Secret")

// write creates the Secret, or replaces the certificate of one this
// command wrote before (a reissue), with a patch on the version read.
func write(ctx context.Context, c client.Client, key types.NamespacedName, data map[string][]byte) error {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "gridsync", Label: LabelValue}},
		Type: corev1.SecretTypeTLS, Data: data,
	}
	err := c.Create(ctx, s)
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("the Secret %s: %w", key, err)
		}
		return nil
	}
	var held corev1.Secret
	if err := c.Get(ctx, key, &held); err != nil {
		return fmt.Errorf("the Secret %s: %w", key, err)
	}
	if held.Labels[Label] != LabelValue || held.Type != corev1.SecretTypeTLS {
		return fmt.Errorf("the Secret %s %w", key, errNotOurs)
	}
	orig := held.DeepCopy()
	held.Data = data
	if err := c.Patch(ctx, &held, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("the Secret %s: %w", key, err)
	}
	return nil
}
