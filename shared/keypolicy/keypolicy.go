// Package keypolicy says which public keys gridsync accepts from a peer:
// in a gossiped record's chain, a CSR, a probed or scraped certificate, or
// an identity read from a Secret. Checking the kind and size of a key is
// cheap; checking a signature made with an unbounded key is not (a 45,000-
// bit RSA key costs a tenth of a second a signature), so every caller
// checks the key before it checks any signature made with it.
//
// Accepted: the kinds gridsync issues and the ones users bring: ECDSA
// P-256 and P-384, Ed25519, and RSA of 2,048 to 4,096 bits with the
// public exponent 65537.
package keypolicy

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
)

// RSA key sizes, in bits, and the one public exponent accepted.
const (
	MinRSABits  = 2048
	MaxRSABits  = 4096
	RSAExponent = 65537
)

// MaxChain is the most certificates a presented chain may hold: a leaf,
// up to two intermediates and a root a peer may choose to send along.
const MaxChain = 4

// ErrKeyRefused wraps every refusal of a key, so callers can count them
// apart from other errors.
var ErrKeyRefused = errors.New("key refused")

// CheckPublicKey refuses a key that is not of an accepted kind and size.
// Its error names the kind and size, never the key.
func CheckPublicKey(pub any) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Errorf("%w: ECDSA curve %s (P-256 or P-384 accepted)", ErrKeyRefused, curveName(k.Curve))
		}
		return nil
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("%w: Ed25519 key of %d bytes", ErrKeyRefused, len(k))
		}
		return nil
	case *rsa.PublicKey:
		if k.N == nil {
			return fmt.Errorf("%w: RSA key without a modulus", ErrKeyRefused)
		}
		if bits := k.N.BitLen(); bits < MinRSABits || bits > MaxRSABits {
			return fmt.Errorf("%w: RSA key of %d bits (%d to %d accepted)", ErrKeyRefused, bits, MinRSABits, MaxRSABits)
		}
		if k.E != RSAExponent {
			return fmt.Errorf("%w: RSA public exponent %d (%d accepted)", ErrKeyRefused, k.E, RSAExponent)
		}
		return nil
	case nil:
		return fmt.Errorf("%w: no public key", ErrKeyRefused)
	default:
		return fmt.Errorf("%w: key type %T", ErrKeyRefused, pub)
	}
}

// CheckCertificate refuses a certificate whose public key CheckPublicKey
// refuses.
func CheckCertificate(c *x509.Certificate) error {
	if c == nil {
		return fmt.Errorf("%w: no certificate", ErrKeyRefused)
	}
	if err := CheckPublicKey(c.PublicKey); err != nil {
		return fmt.Errorf("certificate %q: %w", c.Subject.CommonName, err)
	}
	return nil
}

// CheckChain refuses a chain longer than MaxChain, or with any
// certificate whose key CheckPublicKey refuses. It checks no signature.
func CheckChain(chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return fmt.Errorf("%w: empty chain", ErrKeyRefused)
	}
	if len(chain) > MaxChain {
		return fmt.Errorf("%w: chain of %d certificates (at most %d)", ErrKeyRefused, len(chain), MaxChain)
	}
	for _, c := range chain {
		if err := CheckCertificate(c); err != nil {
			return err
		}
	}
	return nil
}

func curveName(c elliptic.Curve) string {
	if c == nil || c.Params() == nil {
		return "unknown"
	}
	return c.Params().Name
}
