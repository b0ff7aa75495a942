// Package endpointtls turns an InferenceProvider's EndpointTLSConfig into
// the trust and identity of the agent's requests to that provider: the CA
// that alone verifies the server, and the certificate presented for
// mutual TLS. It fails closed: any material that cannot be read or used
// is an Error naming one of four reasons, and the caller makes no request
// at all (never system roots, never plaintext instead).
//
// Reading (Read) and parsing (Raw.Parse) are apart so that a caller can
// compare what it read with what it used last time (Raw.Fingerprint) and
// parse only what changed: material is read at every check, so a rotation
// is used from the next one on, while a steady one costs one get per
// object and no parsing.
//
// No error or message here ever holds a byte of the material.
package endpointtls

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/tlsidentity"
)

// Reason is why the material cannot be used. A provider's status names it
// with a reason of its own per kind of request (HealthCheckTlsSecretMissing,
// MetricsTlsSecretMissing: the controller's provider policy).
type Reason string

// The four reasons, as upstream names them.
const (
	// SecretMissing: a named Secret or ConfigMap does not exist, or the
	// agent may not read it.
	SecretMissing Reason = "TlsSecretMissing"
	// KeyMissing: the named key is absent or empty.
	KeyMissing Reason = "TlsKeyMissing"
	// MaterialInvalid: the PEM holds no certificate or key that parses.
	MaterialInvalid Reason = "TlsMaterialInvalid"
	// IdentityMismatch: the client certificate and private key parse but
	// are not one identity (the certificate is another key's).
	IdentityMismatch Reason = "TlsIdentityMismatch"
)

// Reasons lists the four, so that whoever names them in a status can be
// checked to name each.
func Reasons() []Reason {
	return []Reason{SecretMissing, KeyMissing, MaterialInvalid, IdentityMismatch}
}

// Error is material that cannot be used.
type Error struct {
	Reason  Reason
	Message string
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Message }

// Default keys of the references.
const (
	DefaultCAKey          = "ca.crt"
	DefaultCertificateKey = "tls.crt"
	DefaultPrivateKeyKey  = "tls.key"
)

// Source reads Secrets and ConfigMaps by name. found is false when the
// object does not exist; ErrForbidden says the agent may not read it.
// Other errors are the API server's and pass through unchanged (the
// material is neither known good nor known bad: the caller tries again).
type Source interface {
	Secret(ctx context.Context, namespace, name string) (data map[string][]byte, found bool, err error)
	ConfigMap(ctx context.Context, namespace, name string) (data map[string][]byte, found bool, err error)
}

// ErrForbidden is what a Source returns (wrapped, saying why) for an
// object the agent may not read: outside its namespaces, refused by RBAC,
// or kept from providers.
var ErrForbidden = errors.New("the agent may not read it")

// Raw is the material as read, not yet parsed.
type Raw struct {
	CA         []byte
	Cert, Key  []byte // both nil without a client certificate
	ServerName string
}

// Read gets the material cfg names from src.
func Read(ctx context.Context, cfg *v1alpha1.EndpointTLSConfig, src Source) (*Raw, error) {
	raw := &Raw{ServerName: cfg.ServerName}
	var err error
	switch {
	case cfg.CASecretRef != nil:
		ref := cfg.CASecretRef
		raw.CA, err = readKey(ctx, src.Secret, "Secret", "CA", ref.Namespace, ref.Name, cmp.Or(ref.Key, DefaultCAKey))
	case cfg.CAConfigMapRef != nil:
		ref := cfg.CAConfigMapRef
		raw.CA, err = readKey(ctx, src.ConfigMap, "ConfigMap", "CA", ref.Namespace, ref.Name, cmp.Or(ref.Key, DefaultCAKey))
	default:
		// The schema refuses this; an object written before it did is
		// refused here, never verified against the system's roots.
		err = &Error{MaterialInvalid, "no CA is named (set caSecretRef or caConfigMapRef)"}
	}
	if err != nil {
		return nil, err
	}
	if c := cfg.ClientCertificateSecretRef; c != nil {
		if raw.Cert, err = readKey(ctx, src.Secret, "Secret", "client certificate", c.Namespace, c.Name, cmp.Or(c.CertificateKey, DefaultCertificateKey)); err != nil {
			return nil, err
		}
		if raw.Key, err = readKey(ctx, src.Secret, "Secret", "client private key", c.Namespace, c.Name, cmp.Or(c.PrivateKeyKey, DefaultPrivateKeyKey)); err != nil {
			return nil, err
		}
	}
	return raw, nil
}

func readKey(ctx context.Context, get func(context.Context, string, string) (map[string][]byte, bool, error),
	kind, what, namespace, name, key string) ([]byte, error) {
	where := kind + " " + namespace + "/" + name
	data, found, err := get(ctx, namespace, name)
	switch {
	case errors.Is(err, ErrForbidden):
		return nil, &Error{SecretMissing, fmt.Sprintf("the %s %s cannot be read: %v", what, where, err)}
	case err != nil:
		return nil, fmt.Errorf("read the %s %s: %w", what, where, err)
	case !found:
		return nil, &Error{SecretMissing, fmt.Sprintf("the %s %s does not exist", what, where)}
	}
	v := data[key]
	if len(v) == 0 {
		return nil, &Error{KeyMissing, fmt.Sprintf("the %s %s has no key %q, or it is empty", what, where, key)}
	}
	return v, nil
}

// Fingerprint identifies the material: equal fingerprints, equal
// material. It is kept in memory only.
func (r *Raw) Fingerprint() [sha256.Size]byte {
	h := sha256.New()
	for _, part := range [][]byte{r.CA, r.Cert, r.Key, []byte(r.ServerName)} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// Material is parsed, usable trust and identity.
type Material struct {
	// Roots verify the server: the named CA only.
	Roots *x509.CertPool
	// Certificate is presented for mutual TLS; nil without one.
	Certificate *tls.Certificate
	// ServerName overrides the endpoint's host in verification and SNI.
	ServerName string
}

// Parse checks and parses the material.
func (r *Raw) Parse() (*Material, error) {
	m := &Material{Roots: x509.NewCertPool(), ServerName: r.ServerName}
	cas := tlsidentity.ParseChain(r.CA)
	if len(cas) == 0 {
		return nil, &Error{MaterialInvalid, "the CA holds no PEM certificate, or one that does not parse"}
	}
	for _, c := range cas {
		m.Roots.AddCert(c)
	}
	if r.Cert == nil && r.Key == nil {
		return m, nil
	}
	if len(tlsidentity.ParseChain(r.Cert)) == 0 {
		return nil, &Error{MaterialInvalid, "the client certificate holds no PEM certificate, or one that does not parse"}
	}
	if !tlsidentity.ParsesAsKey(r.Key) {
		return nil, &Error{MaterialInvalid, "the client private key holds no PEM private key that parses"}
	}
	pair, err := tls.X509KeyPair(r.Cert, r.Key)
	if err != nil {
		// Both parse on their own: they are not one identity. (The
		// error's text names no material, but it is not passed on.)
		return nil, &Error{IdentityMismatch, "the client certificate is not the client private key's (it was issued for another key)"}
	}
	m.Certificate = &pair
	return m, nil
}

// ClientConfig is the TLS configuration of requests with the material:
// its CA only, its certificate, resumed sessions (a reconnection after an
// idle close costs no full handshake). Connections are made with it by
// keypolicy.DialTLS (as the prober's transports do), which judges the
// server's keys before any signature of its chain is checked and verifies
// the chain for ServerName or the host dialled; with crypto/tls's own
// verification, the keys would be judged after the signatures.
func (m *Material) ClientConfig() *tls.Config {
	cfg := &tls.Config{
		RootCAs:            m.Roots,
		ServerName:         m.ServerName,
		MinVersion:         tls.VersionTLS12,
		ClientSessionCache: tls.NewLRUClientSessionCache(4),
	}
	if m.Certificate != nil {
		cfg.Certificates = []tls.Certificate{*m.Certificate}
	}
	return cfg
}
