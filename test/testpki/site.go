package testpki

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Site is a site's identity from a new grid CA, valid for an hour: its
// certificate and key, and the CA, projected as the agent chart mounts the
// site Secret (tls.crt, tls.key, ca.crt).
type Site struct {
	*Projection
	// Leaf is the site's certificate, as its co-located gateway presents
	// it; Roots trust the grid CA.
	Leaf  tls.Certificate
	Roots *x509.CertPool
	// CACert and CAKey are the grid CA's certificate and key, PEM: a
	// test that makes the agent an issuer puts them in its CA Secret.
	CACert, CAKey []byte
}

// NewSite issues site's identity from a new grid CA.
func NewSite(t testing.TB, site string) *Site {
	t.Helper()
	caPEM, caKey, err := sitetrust.NewCA(time.Now(), time.Hour)
	require.NoError(t, err)
	ca, err := sitetrust.ParseCA(caPEM, caKey)
	require.NoError(t, err)
	chain, key, err := ca.Issue(site, time.Now(), time.Hour)
	require.NoError(t, err)
	s := &Site{Projection: NewProjection(t), Roots: x509.NewCertPool(), CACert: caPEM, CAKey: caKey}
	s.Publish(map[string][]byte{"tls.crt": chain, "tls.key": key, "ca.crt": caPEM})
	s.Leaf, err = tls.X509KeyPair(chain, key)
	require.NoError(t, err)
	s.Roots.AppendCertsFromPEM(caPEM)
	return s
}

// AgentArgs are the agent's signals listener flags for the identity.
func (s *Site) AgentArgs() []string {
	return []string{"--signals-cert", s.Path("tls.crt"), "--signals-key", s.Path("tls.key"), "--signals-ca", s.Path("ca.crt")}
}
