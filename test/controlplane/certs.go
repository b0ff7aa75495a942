package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the control plane's throwaway key material: one CA that signs the
// serving certificate and the admin client certificate (kube-apiserver's
// --client-ca-file), and the ServiceAccount token signing key.
type pki struct {
	caPEM          []byte
	servingCert    string
	servingKey     string
	clientCA       string
	adminCertPEM   []byte
	adminKeyPEM    []byte
	serviceAccount string // private key; kube-apiserver derives the public key

	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

func newPKI(dir string) (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gridsync-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	issue := func(serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
		return issueLeaf(ca, caKey, serial, tmpl)
	}

	servingCert, servingKey, err := issue(2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		// 10.96.0.1 is the kubernetes Service's cluster IP, which pods of
		// a test node reach inside the node's network namespace.
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(KubernetesServiceIP)},
	})
	if err != nil {
		return nil, fmt.Errorf("issue serving certificate: %w", err)
	}
	// system:masters is the group that kube-apiserver grants everything.
	adminCert, adminKey, err := issue(3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "gridsync-test-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("issue admin certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}

	p := &pki{
		caPEM:          pemBlock("CERTIFICATE", caDER),
		servingCert:    filepath.Join(dir, "serving.crt"),
		servingKey:     filepath.Join(dir, "serving.key"),
		clientCA:       filepath.Join(dir, "ca.crt"),
		adminCertPEM:   adminCert,
		adminKeyPEM:    adminKey,
		serviceAccount: filepath.Join(dir, "service-account.key"),
		ca:             ca,
		caKey:          caKey,
		serial:         100,
	}
	files := map[string][]byte{
		p.servingCert:    servingCert,
		p.servingKey:     servingKey,
		p.clientCA:       p.caPEM,
		p.serviceAccount: pemBlock("EC PRIVATE KEY", saDER),
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", filepath.Base(path), err)
		}
	}
	return p, nil
}

// KubernetesServiceIP is the cluster IP of the kubernetes Service (the
// first address of --service-cluster-ip-range), which in-cluster clients
// dial.
const KubernetesServiceIP = "10.96.0.1"

// ClientCertificate issues a client certificate of the control plane's CA
// for user cn in groups orgs (a node's system:node:<name> in
// system:nodes, the scheduler's system:kube-scheduler), valid a day.
func (cp *ControlPlane) ClientCertificate(cn string, orgs ...string) (certPEM, keyPEM []byte, err error) {
	cp.mu.Lock()
	cp.pki.serial++
	serial := cp.pki.serial
	cp.mu.Unlock()
	return issueLeaf(cp.pki.ca, cp.pki.caKey, serial, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: orgs},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// issueLeaf signs tmpl (its names and usages) with a new P-256 key,
// valid from an hour ago for a day.
func issueLeaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
}

// CAFile is the control plane's CA certificate (it signs the serving and
// client certificates): a kube-controller-manager's --root-ca-file.
func (cp *ControlPlane) CAFile() string { return cp.pki.clientCA }

// ServiceAccountKeyFile is the ServiceAccount token signing key.
func (cp *ControlPlane) ServiceAccountKeyFile() string { return cp.pki.serviceAccount }

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
