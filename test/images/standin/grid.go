package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// gridHold is how long a grid connection is held: its handshake, then
// until the peer hangs up. Longer than a probe's timeout, so that over a
// lossy link a slow handshake is the prober's to give up, as with a real
// gateway.
const gridHold = 30 * time.Second

// serveGrid serves the gateway's grid listener: mutual TLS with the
// site's identity from dir (tls.crt, tls.key and ca.crt, the chart's
// gridIdentity projection), the peer's certificate required and verified
// against ca.crt, which is what a remote site's trust probe checks. The
// identity is read on every handshake, from one generation of the
// kubelet's projected volume: a renewed certificate is presented on the
// next handshake. It answers nothing: the probe sends nothing.
func serveGrid(ctx context.Context, addr, dir string) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	fmt.Println("standin-gateway: grid listener on", addr, "with the identity of", dir)
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	tl := tls.NewListener(ln, &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return gridConfig(dir)
		},
	})
	for {
		c, err := tl.Accept()
		if err != nil {
			// Closed by the context's end: a clean stop, not a failure.
			return ignoreAfter(ctx, err)
		}
		go func() {
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(gridHold))
			var b [1]byte
			_, _ = c.Read(b[:])
		}()
	}
}

// gridConfig is one handshake's TLS configuration from the identity's
// current generation.
func gridConfig(dir string) (*tls.Config, error) {
	cert, key, cerr, kerr := readIdentity(dir)
	if err := errors.Join(cerr, kerr); err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(generation(dir), "ca.crt"))
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s/ca.crt holds no certificate", dir)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS12}, nil
}

// ignoreAfter is err unless ctx has ended (which closed the listener).
func ignoreAfter(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
