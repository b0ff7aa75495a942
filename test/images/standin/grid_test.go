package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/publish"
	"github.com/gridsync/gridsync/test/testpki"
)

// The grid listener presents the identity's current generation and takes
// only a peer whose certificate chains to the identity's ca.crt, as a
// remote site's trust probe needs.
func TestTheGridListenerPresentsTheCurrentIdentityToGridPeersOnly(t *testing.T) {
	root := testpki.NewRoot(t, "grid-ca")
	other := testpki.NewRoot(t, "other-ca")
	dir := t.TempDir()
	publishIdentity := func(name string) {
		cert, key := root.Leaf(t, name, testpki.Opts{Names: []string{name}})
		require.NoError(t, publish.GenerationSynced(dir, map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": root.PEM}, 0o644, false))
	}
	publishIdentity("east.grid.internal")

	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- serveGrid(ctx, addr, dir) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-served)
	})

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(root.PEM)
	handshake := func(issuer *testpki.Issuer, name string) (*x509.Certificate, error) {
		cert, key := issuer.Leaf(t, "west.grid.internal", testpki.Opts{ClientOnly: true})
		pair, err := tls.X509KeyPair(cert, key)
		require.NoError(t, err)
		var c *tls.Conn
		require.Eventually(t, func() bool {
			raw, err := (&net.Dialer{Timeout: time.Second}).DialContext(t.Context(), "tcp", addr)
			if err != nil {
				return false
			}
			c = tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: name, Certificates: []tls.Certificate{pair}, MaxVersion: tls.VersionTLS12})
			return true
		}, 5*time.Second, 20*time.Millisecond, "the grid listener listens")
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if err := c.HandshakeContext(t.Context()); err != nil {
			return nil, err
		}
		return c.ConnectionState().PeerCertificates[0], nil
	}

	leaf, err := handshake(root, "east.grid.internal")
	require.NoError(t, err, "a grid peer is taken")
	assert.Equal(t, "east.grid.internal", leaf.Subject.CommonName)

	_, err = handshake(other, "east.grid.internal")
	assert.Error(t, err, "a peer of another CA is refused")

	publishIdentity("east-renewed.grid.internal")
	leaf, err = handshake(root, "east-renewed.grid.internal")
	require.NoError(t, err)
	assert.Equal(t, "east-renewed.grid.internal", leaf.Subject.CommonName, "the renewed identity is presented on the next handshake")
}
