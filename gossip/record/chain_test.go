package record

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/test/testpki"
)

// A chain is judged by what costs nothing before any signature is
// checked: its length, the kinds and sizes of its keys (keypolicy), and
// whether it names the grid CA by key identifier.
func TestChainRefusedBeforeAnySignature(t *testing.T) {
	ca, other := testpki.NewGridCA(t), testpki.NewGridCA(t)
	now := time.Now()
	good := ca.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{}).Certificate[0]
	p224, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	require.NoError(t, err)
	big := testpki.Invented(t, "huge", testpki.HugeRSAKey(t, 16384), ca.Cert, ca.Key, true)
	for name, c := range map[string]struct {
		chain [][]byte
		want  string
	}{
		"the site's certificate":                     {[][]byte{good}, ""},
		"the site's certificate and the grid CA":     {[][]byte{good, ca.Cert.Raw}, ""},
		"a 16,384-bit RSA key":                       {[][]byte{big}, RejectKeyRefused},
		"the site's certificate under a huge key":    {[][]byte{good, big}, RejectKeyRefused},
		"a P-224 key":                                {[][]byte{testpki.Invented(t, "p224", p224.Public(), ca.Cert, ca.Key, false)}, RejectKeyRefused},
		"an RSA key with another exponent":           {[][]byte{testpki.Invented(t, "e3", &rsa.PublicKey{N: testpki.HugeRSAKey(t, 2048).N, E: 3}, ca.Cert, ca.Key, false)}, RejectKeyRefused},
		"five certificates":                          {[][]byte{good, good, good, good, good}, RejectBadCertificate},
		"another CA's leaf":                          {[][]byte{other.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{}).Certificate[0]}, RejectUntrusted},
		"the leaf followed by what did not issue it": {[][]byte{good, other.Cert.Raw}, RejectUntrusted},
		"not a certificate":                          {[][]byte{[]byte("junk")}, RejectBadCertificate},
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, c.want, verifyChain(trustOf(ca), c.chain, now).reason)
		})
	}

	// Linked by key identifier: another CA's leaf is refused before its
	// signature is looked at, and so is one that names the grid CA's key
	// but another issuer.
	otherLeaf, err := x509.ParseCertificate(other.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{}).Certificate[0])
	require.NoError(t, err)
	goodLeaf, err := x509.ParseCertificate(good)
	require.NoError(t, err)
	ids := RootIDsOf([]*x509.Certificate{ca.Cert})
	require.True(t, linked([]*x509.Certificate{goodLeaf}, ids))
	require.False(t, linked([]*x509.Certificate{otherLeaf}, ids))
	require.False(t, linked([]*x509.Certificate{goodLeaf, otherLeaf}, ids), "a leaf followed by a certificate that did not issue it")
}

// Refused chains are remembered apart from good ones: the same junk costs
// a map lookup, and a flood of invented chains never pushes out a site's
// good chain.
func TestRefusedChainsRememberedApart(t *testing.T) {
	ca := testpki.NewGridCA(t)
	trust := trustOf(ca)
	now := time.Now()
	good := [][]byte{ca.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{}).Certificate[0]}
	_, why := trust.Chains.Verify(trust, good, now)
	require.Empty(t, why)
	for i := range maxCachedChains + 10 {
		junk := [][]byte{{0x30, byte(i), byte(i >> 8), byte(i >> 16)}}
		_, why := trust.Chains.Verify(trust, junk, now)
		require.Equal(t, RejectBadCertificate, why)
	}
	require.True(t, knownChain(trust.Chains, good), "the good chain was pushed out by refused ones")

	// A refused chain answers from memory: its reason is the one
	// remembered, even where a new check would now say otherwise.
	refused := [][]byte{testpki.Invented(t, "huge", testpki.HugeRSAKey(t, 8192), ca.Cert, ca.Key, true)}
	_, why = trust.Chains.Verify(trust, refused, now)
	require.Equal(t, RejectKeyRefused, why)
	trust.Chains.mu.Lock()
	trust.Chains.refused[chainHash(refused)] = "remembered"
	trust.Chains.mu.Unlock()
	_, why = trust.Chains.Verify(trust, refused, now)
	require.Equal(t, "remembered", why)
}

// knownChain reports whether a chain is remembered as good.
func knownChain(c *ChainCache, chain [][]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.good[chainHash(chain)]
	return ok
}
