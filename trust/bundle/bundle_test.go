package bundle

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/trust/sitetrust"
)

func newCA(t *testing.T) *sitetrust.CA {
	t.Helper()
	certPEM, keyPEM, err := sitetrust.NewCA(time.Now(), 24*time.Hour)
	require.NoError(t, err)
	ca, err := sitetrust.ParseCA(certPEM, keyPEM)
	require.NoError(t, err)
	return ca
}

func TestNextEvictsListsAndLifts(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	b1, err := Next(nil, "prod", "site-a", []string{"site-c", "site-b"}, t0)
	require.NoError(t, err)
	require.Equal(t, []string{"site-b", "site-c"}, b1.EvictedSites())
	require.True(t, b1.Evicted("site-b"))
	require.False(t, b1.Evicted("site-d"))

	same, err := Next(b1, "prod", "site-a", []string{"site-b", "site-c"}, t0.Add(time.Minute))
	require.NoError(t, err)
	require.Nil(t, same, "the same list changes nothing")

	t1 := t0.Add(time.Hour)
	b2, err := Next(b1, "prod", "site-a", []string{"site-c"}, t1)
	require.NoError(t, err)
	require.Greater(t, b2.Version, b1.Version)
	require.Equal(t, []string{"site-c"}, b2.EvictedSites())
	require.False(t, b2.Evicted("site-b"), "lifted")
	// A certificate of site-b from before its eviction stays refused; one
	// issued after it (a new enrolment) is not.
	require.True(t, b2.Refuses("site-b", t0.Add(-time.Hour)))
	require.True(t, b2.Refuses("site-b", t0))
	require.False(t, b2.Refuses("site-b", b2.IssueFloor("site-b")))
	require.True(t, b2.Refuses("site-c", t1.Add(time.Hour)), "an eviction that holds refuses every certificate")
	require.False(t, b2.Refuses("site-d", t0))

	// Evicted again after the lift: from the new time.
	t2 := t1.Add(time.Hour)
	b3, err := Next(b2, "prod", "site-a", []string{"site-b", "site-c"}, t2)
	require.NoError(t, err)
	require.True(t, b3.Evicted("site-b"))
	require.Equal(t, t2, b3.IssueFloor("site-b").Add(-time.Second))

	_, err = Next(nil, "prod", "site-a", []string{"Not_A_Site"}, t0)
	require.Error(t, err)
}

func TestSignedBundleVerifiesOnlyAgainstItsCA(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	b, err := Next(nil, "prod", "site-a", []string{"site-b"}, time.Now())
	require.NoError(t, err)
	signed, err := Sign(b, ca.Signer())
	require.NoError(t, err)

	got, err := Open(signed, "prod", []*x509.Certificate{other.Cert, ca.Cert})
	require.NoError(t, err)
	require.Equal(t, []string{"site-b"}, got.EvictedSites())

	_, err = Open(signed, "prod", []*x509.Certificate{other.Cert})
	require.ErrorIs(t, err, ErrBadSignature)
	_, err = Open(signed, "staging", []*x509.Certificate{ca.Cert})
	require.ErrorIs(t, err, ErrWrongNetwork)

	// A bundle rewritten to lift the eviction keeps the old signature.
	var s Signed
	require.NoError(t, json.Unmarshal(signed, &s))
	s.Body = []byte(strings.Replace(string(s.Body), `"site-b"`, `"site-x"`, 1))
	forged, _ := json.Marshal(s)
	_, err = Open(forged, "prod", []*x509.Certificate{ca.Cert})
	require.ErrorIs(t, err, ErrBadSignature)

	_, err = Open(make([]byte, MaxSignedSize+1), "prod", []*x509.Certificate{ca.Cert})
	require.ErrorIs(t, err, ErrTooLarge)
	_, err = Open([]byte(`{"b":"","s":""}`), "prod", []*x509.Certificate{ca.Cert})
	require.ErrorIs(t, err, ErrMalformed)
}

func TestBookKeepsTheNewestAndTells(t *testing.T) {
	ca := newCA(t)
	book := NewBook()
	var told []string
	book.Subscribe(func(n string) { told = append(told, n) })

	t0 := time.Now()
	b1, _ := Next(nil, "prod", "site-a", []string{"site-b"}, t0)
	s1, _ := Sign(b1, ca.Signer())
	b2, _ := Next(b1, "prod", "site-a", nil, t0.Add(time.Minute))
	s2, _ := Sign(b2, ca.Signer())

	kept, err := book.Offer("prod", s1)
	require.NoError(t, err)
	require.False(t, kept, "not loaded yet: the network has no grid CA here")

	require.NoError(t, book.Load("prod", []*x509.Certificate{ca.Cert}, nil, nil))
	require.Equal(t, []string{"prod"}, told, "loaded")
	told = nil
	kept, err = book.Offer("prod", s2)
	require.NoError(t, err)
	require.True(t, kept)
	kept, err = book.Offer("prod", s1)
	require.NoError(t, err)
	require.False(t, kept, "an older bundle never replaces a newer one")
	kept, _ = book.Offer("prod", s2)
	require.False(t, kept, "the same bundle again")
	require.Equal(t, []string{"prod"}, told)
	require.False(t, book.Bundle("prod").Evicted("site-b"))
	require.True(t, book.RefusesAnywhere("site-b", t0.Add(-time.Hour)), "lifted, but a certificate of before stays refused")

	kept, err = book.Offer("prod", []byte("junk"))
	require.ErrorIs(t, err, ErrMalformed)
	require.False(t, kept)
}

// A rotation: the issuer names the old and the new CA, signed by both;
// then the new alone, signed by the new. A site configured with the old
// CA follows each step, and so does a site restarted with the old CA that
// is offered the steps again; a bundle that names a CA nobody trusted
// before is refused, and so is the last step alone to a site that never
// saw the first.
func TestRootsPassFromTheOldCAToTheNew(t *testing.T) {
	old, next, evil := newCA(t), newCA(t), newCA(t)
	t0 := time.Now()
	both, err := NextWith(nil, "prod", "site-a", nil, [][]byte{old.Cert.Raw, next.Cert.Raw}, "new", t0)
	require.NoError(t, err)
	s1, err := Sign(both, old.Signer(), next.Signer())
	require.NoError(t, err)
	alone, err := NextWith(both, "prod", "site-a", nil, [][]byte{next.Cert.Raw}, "new", t0.Add(time.Minute))
	require.NoError(t, err)
	s2, err := Sign(alone, next.Signer())
	require.NoError(t, err)

	book := NewBook()
	require.NoError(t, book.Load("prod", []*x509.Certificate{old.Cert}, nil, nil))
	kept, err := book.Offer("prod", s2)
	require.ErrorIs(t, err, ErrBadSignature, "the new CA alone is not trusted yet")
	require.False(t, kept)
	for _, s := range [][]byte{s1, s2} {
		kept, err = book.Offer("prod", s)
		require.NoError(t, err)
		require.True(t, kept)
	}
	require.True(t, sameCerts([]*x509.Certificate{next.Cert}, book.Roots("prod", []*x509.Certificate{old.Cert})), "the old CA retired")
	require.Len(t, book.Chain("prod"), 2)

	// Restarted with the old CA configured: what it kept, then a bundle
	// the retired CA signed, arriving by gossip.
	restarted := NewBook()
	_, err = restarted.Offer("prod", s2)
	require.NoError(t, err, "not loaded: ignored")
	require.NoError(t, restarted.Load("prod", []*x509.Certificate{old.Cert}, book.Chain("prod"), book.Signed("prod")))
	require.True(t, sameCerts([]*x509.Certificate{next.Cert}, restarted.Roots("prod", []*x509.Certificate{old.Cert})))
	require.True(t, sameCerts([]*x509.Certificate{evil.Cert}, restarted.Roots("prod", []*x509.Certificate{evil.Cert})), "another configured CA is the operator's word")

	forged, err := NextWith(alone, "prod", "site-a", nil, [][]byte{evil.Cert.Raw}, "evil", t0.Add(2*time.Minute))
	require.NoError(t, err)
	sf, err := Sign(forged, evil.Signer())
	require.NoError(t, err)
	_, err = book.Offer("prod", sf)
	require.ErrorIs(t, err, ErrBadSignature)
	_, err = book.Offer("prod", mustSignWith(t, forged, old))
	require.ErrorIs(t, err, ErrBadSignature, "the retired CA signs nothing the network trusts")
}

func mustSignWith(t *testing.T, b *Bundle, ca *sitetrust.CA) []byte {
	t.Helper()
	s, err := Sign(b, ca.Signer())
	require.NoError(t, err)
	return s
}

// The largest bundle a network can have (every entry evicted and lifted,
// under the longest site names) is signed, and taken by Open.
func TestTheLargestBundleFits(t *testing.T) {
	ca := newCA(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	lifted := t0.Add(time.Hour)
	b := &Bundle{Network: strings.Repeat("n", 253), Issuer: strings.Repeat("i", 63), Version: uint64(lifted.UnixNano())}
	for i := range MaxEvictions {
		b.Evictions = append(b.Evictions, Eviction{Site: fmt.Sprintf("s%062d", i), Since: t0, Lifted: &lifted})
	}
	signed, err := Sign(b, ca.Signer(), newCA(t).Signer())
	require.NoError(t, err)
	require.LessOrEqual(t, len(signed), MaxSignedSize)
	got, err := Open(signed, b.Network, []*x509.Certificate{ca.Cert})
	require.NoError(t, err)
	require.Len(t, got.Evictions, MaxEvictions)
	b.Evictions = append(b.Evictions, b.Evictions...)
	_, err = Sign(b, ca.Signer())
	require.Error(t, err, "past the size every site takes: refused when signed, not by every receiver")
}

// A network that lifted evictions before can still evict as many sites as
// its spec allows: the lifts longest ago make room; no site still evicted
// is dropped.
func TestTheOldestLiftsMakeRoomForNewEvictions(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	prev, err := Next(nil, "net", "issuer", []string{"lifted-early", "lifted-late"}, t0)
	require.NoError(t, err)
	prev, err = Next(prev, "net", "issuer", []string{"lifted-late"}, t0.Add(time.Hour)) // lifted-early lifted
	require.NoError(t, err)
	prev, err = Next(prev, "net", "issuer", nil, t0.Add(2*time.Hour)) // lifted-late lifted
	require.NoError(t, err)
	var evicted []string
	for i := range MaxEvictions - 1 {
		evicted = append(evicted, fmt.Sprintf("site-%03d", i))
	}
	next, err := Next(prev, "net", "issuer", evicted, t0.Add(3*time.Hour))
	require.NoError(t, err, "%d evicted beside two lifts", len(evicted))
	require.Len(t, next.Evictions, MaxEvictions)
	var sites []string
	for _, e := range next.Evictions {
		sites = append(sites, e.Site)
	}
	assert.NotContains(t, sites, "lifted-early", "the lift longest ago made room")
	assert.Contains(t, sites, "lifted-late")

	_, err = Next(next, "net", "issuer", append(evicted, "one-more", "and-another"), t0.Add(4*time.Hour))
	require.Error(t, err, "more sites evicted than a bundle holds, with no lift left to drop")
}
