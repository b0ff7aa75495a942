package sign

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/secure-systems-lab/go-securesystemslib/encrypted"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// The PEM types of a private key as `cosign generate-key-pair` writes it:
// PKCS #8 encrypted with scrypt and NaCl secretbox (go-securesystemslib's
// encrypted format). Cosign before v2 wrote the second.
const (
	sigstoreKeyPEMType = "ENCRYPTED SIGSTORE PRIVATE KEY"
	cosignKeyPEMType   = "ENCRYPTED COSIGN PRIVATE KEY"
	pkcs8PEMType       = "PRIVATE KEY"
)

// PasswordEnv holds the password of an encrypted key, as for cosign.
const PasswordEnv = "COSIGN_PASSWORD"

// EnvPassword is the password in $COSIGN_PASSWORD, which may be empty (cosign
// allows an empty password) but must be set.
func EnvPassword() ([]byte, error) {
	pw, ok := os.LookupEnv(PasswordEnv)
	if !ok {
		return nil, fmt.Errorf("the key is encrypted: set %s to its password, as for cosign sign", PasswordEnv)
	}
	return []byte(pw), nil
}

// LoadPrivateKey reads a private key in PEM: cosign's encrypted key (the
// password from password()) or an unencrypted PKCS #8 key. Messages are
// hashed with SHA-256 (Ed25519 keys sign them whole), which is what
// `cosign verify --key` checks with.
func LoadPrivateKey(pemBytes []byte, password func() ([]byte, error)) (*Signer, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("no PEM block in the key")
	}
	der := block.Bytes
	switch block.Type {
	case sigstoreKeyPEMType, cosignKeyPEMType:
		pw, err := password()
		if err != nil {
			return nil, err
		}
		if der, err = encrypted.Decrypt(block.Bytes, pw); err != nil {
			return nil, fmt.Errorf("decrypting the key (is %s its password?): %w", PasswordEnv, err)
		}
	case pkcs8PEMType:
	default:
		return nil, fmt.Errorf("the key is a PEM %q: want cosign's (%q, from cosign generate-key-pair) or PKCS #8 (%q)", block.Type, sigstoreKeyPEMType, pkcs8PEMType)
	}
	pk, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("the key: %w", err)
	}
	sv, err := signature.LoadSignerVerifier(pk, crypto.SHA256)
	if err != nil {
		return nil, err
	}
	return &Signer{sv: sv}, nil
}

// LoadPublicKey reads a public key in PEM (PKIX), as cosign.pub is.
func LoadPublicKey(pemBytes []byte) (signature.Verifier, error) {
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("the public key: %w", err)
	}
	return signature.LoadVerifier(pub, crypto.SHA256)
}
