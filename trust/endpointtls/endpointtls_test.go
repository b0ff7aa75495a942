package endpointtls

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/test/testpki"
)

// objects is a Source over fixed objects: namespace/name → data.
type objects struct {
	secrets, configMaps map[string]map[string][]byte
	forbidden           map[string]bool
	err                 error
}

func (o objects) get(m map[string]map[string][]byte, ns, name string) (map[string][]byte, bool, error) {
	if o.err != nil {
		return nil, false, o.err
	}
	if o.forbidden[ns] {
		return nil, false, ErrForbidden
	}
	data, ok := m[ns+"/"+name]
	return data, ok, nil
}

func (o objects) Secret(_ context.Context, ns, name string) (map[string][]byte, bool, error) {
	return o.get(o.secrets, ns, name)
}

func (o objects) ConfigMap(_ context.Context, ns, name string) (map[string][]byte, bool, error) {
	return o.get(o.configMaps, ns, name)
}

type pki struct {
	ca                  *testpki.Issuer
	clientCert, cliKey  []byte
	otherCert, otherKey []byte
}

func newPKI(t *testing.T) pki {
	ca := testpki.NewRoot(t, "provider-ca")
	p := pki{ca: ca}
	p.clientCert, p.cliKey = ca.Leaf(t, "agent", testpki.Opts{ClientOnly: true})
	p.otherCert, p.otherKey = ca.Leaf(t, "someone-else", testpki.Opts{ClientOnly: true})
	return p
}

func ref(ns, name, key string) *v1alpha1.NamespacedKeyRef {
	return &v1alpha1.NamespacedKeyRef{Namespace: ns, Name: name, Key: key}
}

// Every way the material can fail has its reason, and no message holds a
// byte of it.
func TestReadAndParseFailClosedWithTheirReasons(t *testing.T) {
	p := newPKI(t)
	good := objects{
		secrets: map[string]map[string][]byte{
			"ns/ca":         {"ca.crt": p.ca.PEM},
			"ns/ca-custom":  {"bundle.pem": p.ca.PEM},
			"ns/client":     {"tls.crt": p.clientCert, "tls.key": p.cliKey},
			"ns/crossed":    {"tls.crt": p.clientCert, "tls.key": p.otherKey},
			"ns/garbage-ca": {"ca.crt": []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")},
			"ns/text-ca":    {"ca.crt": []byte("not pem at all")},
			"ns/empty-key":  {"ca.crt": nil},
			"ns/bad-key":    {"tls.crt": p.clientCert, "tls.key": []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")},
			"ns/key-as-crt": {"tls.crt": p.cliKey, "tls.key": p.cliKey},
		},
		configMaps: map[string]map[string][]byte{"ns/ca-bundle": {"ca.crt": p.ca.PEM}},
		forbidden:  map[string]bool{"elsewhere": true},
	}
	client := func(name string) *v1alpha1.ClientCertificateSecretRef {
		return &v1alpha1.ClientCertificateSecretRef{Namespace: "ns", Name: name}
	}
	for _, c := range []struct {
		name string
		cfg  v1alpha1.EndpointTLSConfig
		want Reason // "" for usable
	}{
		{"ca from a Secret", v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "ca", "")}, ""},
		{"ca under its own key", v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "ca-custom", "bundle.pem")}, ""},
		{"ca from a ConfigMap", v1alpha1.EndpointTLSConfig{CAConfigMapRef: ref("ns", "ca-bundle", "")}, ""},
		{"mutual", v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "ca", ""), ClientCertificateSecretRef: client("client")}, ""},
		{"no CA named", v1alpha1.EndpointTLSConfig{ClientCertificateSecretRef: client("client")}, MaterialInvalid},
		{"ca Secret missing", v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "absent", "")}, SecretMissing},
		{"ca ConfigMap missing", v1alpha1.EndpointTLSConfig{CAConfigMapRef: ref("ns", "ca", "")}, SecretMissing},
		{"ca elsewhere", v1alpha1.EndpointTLSConfig{CASecretRef: ref("elsewhere", "ca", "")}, SecretMissing},
		{"ca key missing", v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "ca", "other")}, KeyMissing},
		{"ca key empty", v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "empty-key", "")}, KeyMissing},
		{"ca not PEM", v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "text-ca", "")}, MaterialInvalid},
		{"ca PEM that does not parse", v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "garbage-ca", "")}, MaterialInvalid},
		{"client Secret missing", v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "ca", ""), ClientCertificateSecretRef: client("absent")}, SecretMissing},
		{"client key name missing", v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "ca", ""),
			ClientCertificateSecretRef: &v1alpha1.ClientCertificateSecretRef{Namespace: "ns", Name: "client", PrivateKeyKey: "key.pem"}}, KeyMissing},
		{"client key garbage", v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "ca", ""), ClientCertificateSecretRef: client("bad-key")}, MaterialInvalid},
		{"client certificate is a key", v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "ca", ""), ClientCertificateSecretRef: client("key-as-crt")}, MaterialInvalid},
		{"another key's certificate", v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "ca", ""), ClientCertificateSecretRef: client("crossed")}, IdentityMismatch},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw, err := Read(t.Context(), &c.cfg, good)
			var m *Material
			if err == nil {
				m, err = raw.Parse()
			}
			if c.want == "" {
				require.NoError(t, err)
				require.NotNil(t, m.Roots)
				assert.Equal(t, c.cfg.ClientCertificateSecretRef != nil, m.Certificate != nil)
				return
			}
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, c.want, e.Reason)
			for _, secret := range [][]byte{p.ca.PEM, p.clientCert, p.cliKey, p.otherKey} {
				assert.False(t, bytes.Contains([]byte(err.Error()), secret[30:60]), "a message holds material")
			}
		})
	}
}

// An error of the API server is neither good nor bad material: it passes
// through as itself, not as one of the reasons.
func TestAnAPIErrorIsNotAReason(t *testing.T) {
	boom := errors.New("etcd timed out")
	_, err := Read(t.Context(), &v1alpha1.EndpointTLSConfig{CASecretRef: ref("ns", "ca", "")}, objects{err: boom})
	require.ErrorIs(t, err, boom)
	var e *Error
	assert.False(t, errors.As(err, &e))
}

// The CA named is the only root: a server of another CA does not verify,
// and the configuration resumes sessions.
func TestTheNamedCAIsTheOnlyRoot(t *testing.T) {
	p := newPKI(t)
	other := testpki.NewRoot(t, "other")
	raw := &Raw{CA: p.ca.PEM, ServerName: "provider.internal"}
	m, err := raw.Parse()
	require.NoError(t, err)
	cfg := m.ClientConfig()
	assert.Equal(t, "provider.internal", cfg.ServerName)
	assert.NotNil(t, cfg.ClientSessionCache)
	_, err = p.ca.Cert.Verify(x509.VerifyOptions{Roots: cfg.RootCAs})
	require.NoError(t, err)
	_, err = other.Cert.Verify(x509.VerifyOptions{Roots: cfg.RootCAs})
	require.Error(t, err, "only the named CA")
}

// Equal material, equal fingerprint; any part changed, another.
func TestFingerprintFollowsEveryPart(t *testing.T) {
	base := Raw{CA: []byte("ca"), Cert: []byte("c"), Key: []byte("k"), ServerName: "s"}
	same := base
	assert.Equal(t, base.Fingerprint(), same.Fingerprint())
	for _, changed := range []Raw{
		{CA: []byte("ca2"), Cert: []byte("c"), Key: []byte("k"), ServerName: "s"},
		{CA: []byte("ca"), Cert: []byte("c2"), Key: []byte("k"), ServerName: "s"},
		{CA: []byte("ca"), Cert: []byte("c"), Key: []byte("k2"), ServerName: "s"},
		{CA: []byte("ca"), Cert: []byte("c"), Key: []byte("k"), ServerName: "s2"},
		{CA: []byte("cac"), Cert: nil, Key: []byte("k"), ServerName: "s"}, // bytes moved between parts
	} {
		assert.NotEqual(t, base.Fingerprint(), changed.Fingerprint())
	}
}
