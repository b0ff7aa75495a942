package record

import (
	"crypto/tls"
	"crypto/x509"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/test/testpki"
)

// trustOf is how a network with ca as its grid CA checks records.
func trustOf(ca *testpki.GridCA) *NetworkTrust {
	return &NetworkTrust{Roots: ca.Roots, RootIDs: RootIDsOf([]*x509.Certificate{ca.Cert}), Chains: NewChainCache()}
}

// signedBy is rec signed with c, as a site holding c would sign it.
func signedBy(t *testing.T, c *tls.Certificate, rec Record) Record {
	t.Helper()
	s, err := NewSigner(c)
	require.NoError(t, err)
	require.NoError(t, s.Sign(&rec))
	return rec
}

// The rules a record of another site is held to, one by one, on the
// check alone.
func TestCheckHoldsEveryRecordToItsSignature(t *testing.T) {
	ca := testpki.NewGridCA(t)
	other := testpki.NewGridCA(t)
	now := time.Now()
	ttl := 10 * time.Minute
	closed := trustOf(ca)
	rec := func() Record {
		return Record{Network: "prod", Site: "site-c", Kind: KindProviders, Version: uint64(now.UnixNano()), Grid: "g1",
			Providers: providers("pc")}
	}
	good := signedBy(t, ca.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{}), rec())
	tampered := good
	tampered.Providers = providers("pc", "gpt-evil")
	future := rec()
	future.Version = math.MaxUint64
	old := rec()
	old.Version = uint64(now.Add(-ttl - time.Second).UnixNano())
	for name, c := range map[string]struct {
		trust *NetworkTrust
		rec   Record
		want  string
	}{
		"signed by the site's certificate":           {closed, good, ""},
		"the earlier SPIFFE form":                    {closed, signedBy(t, ca.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{SPIFFE: "SPIFFE://grid.internal/site-c"}), rec()), ""},
		"a network this site takes no part in":       {nil, good, RejectUnknownNetwork},
		"an open network takes an unsigned record":   {&NetworkTrust{Open: true}, rec(), ""},
		"the grid CA did not load":                   {&NetworkTrust{Chains: NewChainCache()}, good, RejectNoRoots},
		"unsigned":                                   {closed, rec(), RejectUnsigned},
		"a body changed after signing":               {closed, tampered, RejectBadSignature},
		"another site's certificate":                 {closed, signedBy(t, ca.SiteLeaf(t, "site-x", testpki.SiteLeafOpts{}), rec()), RejectWrongSite},
		"an organization naming another site":        {closed, signedBy(t, ca.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{Organization: "site-x"}), rec()), RejectWrongSite},
		"a SPIFFE ID naming another site":            {closed, signedBy(t, ca.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{SPIFFE: "SPIFFE://grid.internal/site/site-x"}), rec()), RejectWrongSite},
		"a SPIFFE ID of another trust domain":        {closed, signedBy(t, ca.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{SPIFFE: "SPIFFE://evil.example/site/site-c"}), rec()), RejectWrongSite},
		"another CA's certificate for the site":      {closed, signedBy(t, other.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{}), rec()), RejectUntrusted},
		"an expired certificate":                     {closed, signedBy(t, ca.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(-time.Minute)}), rec()), RejectUntrusted},
		"a certificate not valid yet":                {closed, signedBy(t, ca.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{NotBefore: now.Add(time.Hour), NotAfter: now.Add(2 * time.Hour)}), rec()), RejectUntrusted},
		"versioned at the end of time":               {closed, signedBy(t, ca.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{}), future), RejectFromFuture},
		"versioned at the end of time, open network": {&NetworkTrust{Open: true}, future, RejectFromFuture},
		"written longer ago than the tombstones":     {closed, signedBy(t, ca.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{}), old), RejectTooOld},
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, c.want, Check(c.trust, &c.rec, "g1", now, ttl))
		})
	}
	require.Equal(t, RejectOtherGrid, Check(closed, &good, "g2", now, ttl), "signed for another grid")
	require.Empty(t, Check(closed, &good, "", now, ttl), "a site with no grid ID yet takes it")

	// A signature covers every field: change any and it fails.
	for field, change := range map[string]func(r *Record){
		"network": func(r *Record) { r.Network = "prod2" },
		"kind":    func(r *Record) { r.Kind = KindSignals },
		"version": func(r *Record) { r.Version++ },
		"deleted": func(r *Record) { r.Deleted = true },
		"grid":    func(r *Record) { r.Grid = "g1x" },
		"address": func(r *Record) { r.GatewayAddress = "127.9.9.9:443" },
	} {
		r := good
		change(&r)
		trust := closed
		if field == "network" {
			trust = trustOf(ca)
		}
		got := Check(trust, &r, "", now, ttl)
		require.Equal(t, RejectBadSignature, got, field)
	}
}
