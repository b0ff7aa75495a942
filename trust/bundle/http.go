package bundle

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Path is where a site's signals listener serves the trust bundles it
// holds: the path that reaches a site without gossip (a site that runs no
// SWIM fetches its issuer's at every poll of its Secrets).
const Path = "/v1/grid/trust-bundle"

// Handler serves the newest bundle held of the network the query names,
// as signed, to the callers allowed says (the other sites and the
// co-located gateway: a bundle names evicted sites and grid CAs, public
// but the grid's own business). 404 when none is held.
func Handler(book *Book, allowed func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodGet:
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		case !allowed(r):
			http.Error(w, "a site's certificate is required", http.StatusForbidden)
			return
		}
		signed := book.Signed(r.URL.Query().Get("network"))
		if len(signed) == 0 {
			http.Error(w, "no trust bundle of that network here", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(signed)
	})
}

// Fetcher fetches a network's bundle from another site's listener.
type Fetcher struct {
	// Dial applies the agent's destination rule; net.Dialer when nil.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Timeout bounds one fetch (5 s when zero).
	Timeout time.Duration
}

// ErrNone is a site that holds no bundle of the network.
var ErrNone = errors.New("the site holds no trust bundle of the network")

// Fetch asks the listener at addr, which must present a certificate of
// roots naming serverName, for network's bundle, presenting client. The
// answer is read to MaxSignedSize at most; it is checked by the Book it
// is offered to, not here.
func (f Fetcher) Fetch(ctx context.Context, addr, serverName string, roots *x509.CertPool, client *tls.Certificate, network string) ([]byte, error) {
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dial := f.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	cfg := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	tr := &http.Transport{TLSClientConfig: cfg, DialContext: dial, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+Path+"?network="+url.QueryEscape(network), nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxSignedSize+1))
	switch {
	case err != nil:
		return nil, err
	case resp.StatusCode == http.StatusNotFound:
		return nil, ErrNone
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	case len(body) > MaxSignedSize:
		return nil, ErrTooLarge
	}
	return body, nil
}
