// Package trustmaterial holds each GridNetwork's trust material (the grid
// CA and this site's certificate and key), read from the Secrets the
// network names and shared by the identity stage, the GridSite probes and
// the signals poll.
package trustmaterial

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/trust/bundle"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// KeyCACert is the key of the grid CA's certificate in a ConfigMap or
// Secret.
const KeyCACert = "ca.crt"

// New is an empty cache that reads Secrets and ConfigMaps through api.
func New(api client.Reader) *Cache { return &Cache{api: api} }

// Problem is trust material that is missing or invalid.
type Problem struct {
	Invalid bool
	Message string
}

// Material is what a network's probes need: the grid CA's
// certificates and this site's certificate and key. Version changes when
// what the Secrets hold changes, so that every site is probed again.
type Material struct {
	Version uint64
	loaded  uint64 // the load's sequence number

	digest       [sha256.Size]byte
	loadedDigest [sha256.Size]byte // of what was read, before the bundle's roots
	Roots        *x509.CertPool
	RootCerts    []*x509.Certificate
	// ConfiguredRoots are the grid CAs the network's spec names; Roots
	// and RootCerts are those the network trusts now, which its trust
	// bundle names once the issuer rotated its CA.
	ConfiguredRoots []*x509.Certificate
	configuredPool  *x509.CertPool
	RootsProblem    *Problem
	Client          *tls.Certificate
	ClientProblem   *Problem
}

// Cache holds each network's trust material, loaded from its Secrets
// (the agent gets them by name; it does not watch Secrets) and reloaded by
// Refresh: the periodic Secret poll and the network reconciler after it
// wrote one.
type Cache struct {
	api     client.Reader
	mu      sync.Mutex
	loads   uint64
	entries map[string]*Material
	// Changed is told the network whose material changed.
	Changed func(network string)
	// Bundles, when set, are the networks' trust bundles: the CAs a
	// network trusts once its issuer rotated its grid CA.
	Bundles *bundle.Book
}

// withBundle is tm with the roots the network's trust bundle names, when
// it names any for the CAs tm was configured with.
func (c *Cache) withBundle(name string, tm *Material) *Material {
	out := *tm
	// What was read, the CAs configured: a material derived before from
	// another bundle starts over from them.
	out.digest, out.Roots, out.RootCerts = tm.loadedDigest, tm.configuredPool, tm.ConfiguredRoots
	if c.Bundles == nil || tm.RootsProblem != nil {
		return &out
	}
	roots := c.Bundles.Roots(name, tm.ConfiguredRoots)
	if len(roots) == 0 || slices.EqualFunc(roots, tm.ConfiguredRoots, func(a, b *x509.Certificate) bool { return a.Equal(b) }) {
		return &out
	}
	out.Roots, out.RootCerts = x509.NewCertPool(), roots
	h := sha256.New()
	h.Write(tm.loadedDigest[:])
	for _, r := range roots {
		out.Roots.AddCert(r)
		h.Write(r.Raw)
	}
	copy(out.digest[:], h.Sum(nil))
	return &out
}

// BundleChanged takes a network's new trust bundle into its material:
// the roots it names, when they changed, make a new version, told to
// Changed. It reports whether it told.
func (c *Cache) BundleChanged(name string) bool {
	c.mu.Lock()
	prev := c.entries[name]
	if prev == nil {
		c.mu.Unlock()
		return false
	}
	tm := c.withBundle(name, prev)
	if tm.digest == prev.digest {
		c.mu.Unlock()
		return false
	}
	tm.Version = prev.Version + 1
	c.entries[name] = tm
	c.mu.Unlock()
	if c.Changed == nil {
		return false
	}
	c.Changed(name)
	return true
}

// Get is the network's material, loaded on first use.
func (c *Cache) Get(ctx context.Context, network *v1alpha1.GridNetwork) *Material {
	c.mu.Lock()
	tm := c.entries[network.Name]
	c.mu.Unlock()
	if tm != nil {
		return tm
	}
	c.Refresh(ctx, network)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[network.Name]
}

// Refresh reloads a network's trust material and, when it differs from
// what was held, bumps its version and reports the change.
func (c *Cache) Refresh(ctx context.Context, network *v1alpha1.GridNetwork) {
	c.mu.Lock()
	c.loads++
	seq := c.loads
	c.mu.Unlock()
	tm := c.withBundle(network.Name, Load(ctx, c.api, network))
	tm.loaded = seq
	c.mu.Lock()
	prev := c.entries[network.Name]
	// A load that started later and already stored wins: an older one
	// (a probe's, begun before the agent wrote a Secret) must not put
	// back what it read.
	if prev != nil && (prev.digest == tm.digest || prev.loaded > seq) {
		c.mu.Unlock()
		return
	}
	if prev != nil {
		tm.Version = prev.Version + 1
	}
	if c.entries == nil {
		c.entries = map[string]*Material{}
	}
	c.entries[network.Name] = tm
	c.mu.Unlock()
	if prev != nil && c.Changed != nil {
		c.Changed(network.Name)
	}
}

// Forget drops a network's material (the network is gone).
func (c *Cache) Forget(network string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, network)
}

// Load reads a network's CA (caConfigMapRef, else ca.crt or tls.crt
// of caSecretRef) and site identity (tls.crt and tls.key of
// siteSecretRef). Messages name fields and objects, never contents.
func Load(ctx context.Context, api client.Reader, network *v1alpha1.GridNetwork) *Material {
	tm := &Material{}
	h := sha256.New()
	t := network.Spec.TLS
	if t == nil {
		t = &v1alpha1.GridTLS{}
	}
	var caPEM []byte
	var caAt string
	switch {
	case t.CAConfigMapRef != nil:
		ref := t.CAConfigMapRef
		key := ref.Key
		if key == "" {
			key = KeyCACert
		}
		caAt = fmt.Sprintf("spec.tls.caConfigMapRef (ConfigMap %s/%s, key %s)", ref.Namespace, ref.Name, key)
		var cm corev1.ConfigMap
		if err := api.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &cm); err != nil {
			tm.RootsProblem = &Problem{Message: caAt + ": " + base.APIFailure(err, "get", "ConfigMap")}
		} else if caPEM = []byte(cm.Data[key]); len(caPEM) == 0 {
			tm.RootsProblem = &Problem{Message: caAt + ": the key is missing or empty"}
		}
	case t.CASecretRef != nil:
		ref := t.CASecretRef
		caAt = fmt.Sprintf("spec.tls.caSecretRef (Secret %s/%s)", ref.Namespace, ref.Name)
		var s corev1.Secret
		if err := api.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &s); err != nil {
			tm.RootsProblem = &Problem{Message: caAt + ": " + base.APIFailure(err, "get", "Secret")}
		} else {
			if caPEM = s.Data[KeyCACert]; len(caPEM) == 0 {
				if caPEM = s.Data[corev1.TLSCertKey]; len(caPEM) == 0 {
					tm.RootsProblem = &Problem{Message: caAt + ": neither ca.crt nor tls.crt holds the grid CA"}
				}
			}
			// A rotation's stages change the CAs beside the configured
			// one (the issuer's next.crt, previous.crt, tls.crt): a new
			// version, so that the issuer signs the stage at once.
			for _, k := range []string{corev1.TLSCertKey, "next.crt", "previous.crt"} {
				h.Write(s.Data[k])
				h.Write([]byte{0})
			}
		}
	default:
		tm.RootsProblem = &Problem{Message: "spec.tls.caSecretRef (or caConfigMapRef) names no grid CA"}
	}
	if tm.RootsProblem == nil {
		certs, err := sitetrust.ParseCertificates(caPEM)
		if err != nil {
			tm.RootsProblem = &Problem{Invalid: true, Message: caAt + ": the grid CA: " + err.Error()}
		} else {
			tm.Roots, tm.RootCerts, tm.ConfiguredRoots = x509.NewCertPool(), certs, certs
			tm.configuredPool = tm.Roots
			for _, c := range certs {
				tm.Roots.AddCert(c)
				h.Write(c.Raw)
			}
		}
	}
	h.Write([]byte{0})
	if ref := t.SiteSecretRef; ref == nil {
		tm.ClientProblem = &Problem{Message: "spec.tls.siteSecretRef names no site certificate (the probe's client identity)"}
	} else {
		at := fmt.Sprintf("spec.tls.siteSecretRef (Secret %s/%s)", ref.Namespace, ref.Name)
		var s corev1.Secret
		if err := api.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &s); err != nil {
			tm.ClientProblem = &Problem{Message: at + ": " + base.APIFailure(err, "get", "Secret")}
		} else if len(s.Data[corev1.TLSCertKey]) == 0 || len(s.Data[corev1.TLSPrivateKeyKey]) == 0 {
			tm.ClientProblem = &Problem{Message: at + ": tls.crt or tls.key is missing (not issued yet?)"}
		} else if held, err := sitetrust.ParseHeld(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]); err != nil {
			tm.ClientProblem = &Problem{Invalid: true, Message: at + ": " + err.Error()}
		} else {
			tm.Client = &held.Pair
			for _, c := range held.Pair.Certificate {
				h.Write(c)
			}
			h.Write(s.Data[corev1.TLSPrivateKeyKey])
		}
	}
	for _, p := range []*Problem{tm.RootsProblem, tm.ClientProblem} {
		if p != nil {
			h.Write([]byte(p.Message))
		}
	}
	copy(tm.digest[:], h.Sum(nil))
	tm.loadedDigest = tm.digest
	return tm
}
