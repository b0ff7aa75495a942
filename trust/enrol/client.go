package enrol

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/gridsync/gridsync/shared/keypolicy"
	"github.com/gridsync/gridsync/shared/redial"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Issuer is where a site enrols: the issuer site's signals listener.
type Issuer struct {
	// Address is host:port.
	Address string
	// Site is the issuer's site name: its certificate must name it, so
	// that no other site of the grid can take a token meant for it.
	Site string
}

// RefusedError is the issuer's answer when it refused.
type RefusedError struct{ Refusal }

func (e *RefusedError) Error() string { return e.Message + " (" + e.Reason + ")" }

// UnreachableError is a request that got no answer from the issuer.
type UnreachableError struct{ Err error }

func (e *UnreachableError) Error() string { return e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

// Client asks the issuer for certificates.
type Client struct {
	// Dial connects to the issuer; it applies the agent's destination
	// rule. net.Dialer when nil.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Timeout bounds one request (10 s when zero).
	Timeout time.Duration
}

// NewKey is the key an enrolling site keeps, and the certificate request
// that asks for it to be certified: ECDSA P-256, the subject left to the
// issuer.
func NewKey() (crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	csr, err := CertificateRequest(key)
	if err != nil {
		return nil, nil, err
	}
	return key, csr, nil
}

// CertificateRequest asks for key to be certified, the subject left to
// the issuer: for a new key, or for a key kept from an earlier request
// whose answer did not arrive.
func CertificateRequest(key crypto.Signer) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// Request asks the issuer for a certificate: an enrolment with a token
// (current nil), or a renewal authenticated by the current certificate.
// The answer is checked before it is returned: it chains to the grid CA
// the site already holds, is site's certificate with the site profile,
// and certifies key, so an issuer that answered for another site or key
// is caught.
func (c *Client) Request(ctx context.Context, issuer Issuer, roots *x509.CertPool, req Request, current *tls.Certificate, key crypto.Signer) ([]byte, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	path := EnrollPath
	cfg := &tls.Config{RootCAs: roots, ServerName: sitetrust.DNSName(issuer.Site), MinVersion: tls.VersionTLS12}
	if current != nil {
		path = RenewPath
		cfg.Certificates = []tls.Certificate{*current}
	}
	dial := c.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	// A new connect when one goes unanswered (see redial): over a lossy
	// link the kernel's SYN backoff could take most of the timeout.
	dial = redial.Dialer(timeout, dial)
	tr := &http.Transport{TLSClientConfig: cfg, DialContext: dial, ForceAttemptHTTP2: false, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+issuer.Address+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(hr)
	if err != nil {
		return nil, &UnreachableError{Err: fmt.Errorf("issuer %s (site %s): %w", issuer.Address, issuer.Site, err)}
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, &UnreachableError{Err: fmt.Errorf("issuer %s: reading the answer: %w", issuer.Address, err)}
	}
	if resp.StatusCode != http.StatusOK {
		var ref Refusal
		if json.Unmarshal(raw, &ref) != nil || ref.Reason == "" {
			return nil, &UnreachableError{Err: fmt.Errorf("issuer %s answered HTTP %d", issuer.Address, resp.StatusCode)}
		}
		return nil, &RefusedError{Refusal: ref}
	}
	var out Response
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, errors.New("the issuer's answer is not JSON")
	}
	chain := []byte(out.Chain)
	if err := CheckIssued(chain, roots, req.Site, key.Public(), time.Now()); err != nil {
		return nil, fmt.Errorf("the issuer's certificate is refused: %w", err)
	}
	return chain, nil
}

// CheckIssued checks a certificate the issuer returned: it chains to the
// roots now, is site's certificate with the site profile, and certifies
// pub.
func CheckIssued(chain []byte, roots *x509.CertPool, site string, pub crypto.PublicKey, now time.Time) error {
	certs, err := sitetrust.ParseCertificates(chain)
	if err != nil {
		return err
	}
	// The issuer is a peer: its chain's keys are checked before any
	// signature made with them.
	if err := keypolicy.CheckChain(certs); err != nil {
		return err
	}
	leaf := certs[0]
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("it does not chain to the grid CA: %w", err)
	}
	if err := sitetrust.CheckSVID(leaf, site); err != nil {
		return err
	}
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if e, ok := leaf.PublicKey.(equaler); !ok || !e.Equal(pub) {
		return errors.New("it certifies another key")
	}
	return nil
}
