package keypolicy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// ClientConfig makes cfg, a client's TLS configuration, check the keys of
// the server's chain before any signature made with them is verified,
// then verify the chain to cfg.RootCAs (the system's when nil) and the
// server name, as the standard verification does. Go's own verification
// runs inside the handshake and checks every signature of whatever chain
// the server sends, an invented intermediate with a 60,000-bit key
// included, before any hook can look at it: so it is turned off
// (InsecureSkipVerify) and replaced by this one, which VerifyConnection
// runs on every connection, resumed ones included. It returns cfg.
func ClientConfig(cfg *tls.Config) *tls.Config {
	roots := cfg.RootCAs
	cfg.InsecureSkipVerify = true // replaced by VerifyConnection below, not skipped
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		return VerifyServerChain(cs.PeerCertificates, roots, cs.ServerName)
	}
	return cfg
}

// VerifyServerChain is the check ClientConfig installs: the chain's
// length and keys (CheckChain), then its signatures up to roots (the
// system's when nil) for server authentication, then serverName.
func VerifyServerChain(chain []*x509.Certificate, roots *x509.CertPool, serverName string) error {
	if len(chain) == 0 {
		return errors.New("tls: the server presented no certificate")
	}
	// Refusals are the standard verification's error type, so that a
	// caller that tells TLS failures apart sees one.
	if err := CheckChain(chain); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: chain, Err: fmt.Errorf("the server's chain: %w", err)}
	}
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: intermediates, DNSName: serverName,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if _, err := chain[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: chain, Err: err}
	}
	return nil
}
