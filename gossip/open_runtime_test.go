package gossip

import (
	"crypto/ed25519"
	"crypto/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
)

func recordKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return k
}

func fingerprintOf(k ed25519.PrivateKey) string {
	return record.KeyFingerprint(k.Public().(ed25519.PublicKey))
}

// sender is a site's memberlist, to send records as a key holder does.
func (s *testSite) sender(t *testing.T) func(rs ...Record) {
	t.Helper()
	s.mu.Lock()
	ml := s.ml
	s.mu.Unlock()
	require.NotNil(t, ml)
	return func(rs ...Record) {
		msg, err := record.EncodeDirectRecords(rs)
		require.NoError(t, err)
		for _, n := range s.aliveNodes("") {
			require.NoError(t, ml.SendReliable(n, msg))
		}
	}
}

// siteView is what a site knows of the others in a network: each site's
// gateway, then each remote provider.
func siteView(s *testSite, network string) string {
	v := s.View(network)
	var out []string
	for _, st := range v.Sites {
		out = append(out, st.Name+"@"+st.GatewayAddress)
	}
	return strings.Join(append(out, remoteNames(v)...), ",")
}

// The attack of an open network, on real gossip: a key holder (site X, a
// member with a record key of its own) writes site C's records with a
// forged gateway and an injected provider, newer than C's, signed with
// its own key, and unsigned. A site that holds C to the key C signed with
// first keeps C as C announced itself, counts each forgery by its reason
// and says so once; C's own next update lands. A site that never signs
// (an upstream Grid site) is taken as before, and bound to no key.
func TestAnOpenNetworkHoldsASiteToItsFirstKey(t *testing.T) {
	key := randomKey(t)
	keyC := recordKey(t)
	start := func(site string, rk ed25519.PrivateKey) *testSite {
		s := startSite(t, site, withKey(key), withIdentity("prod", sites.Identity{Open: true, RecordKey: rk}))
		s.waitRunning(t)
		return s
	}
	a, c, u := start("site-a", recordKey(t)), start("site-c", keyC), start("site-u", nil)
	for _, s := range []*testSite{c, u} {
		require.Empty(t, s.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	}
	c.SetGatewayAddress("127.0.0.1:8443")
	u.SetGatewayAddress("127.0.0.1:9443")
	require.NoError(t, c.Publish("prod", "", providers("p-site-c")))
	require.NoError(t, u.Publish("prod", "", providers("p-site-u")))
	want := "site-c@127.0.0.1:8443,site-u@127.0.0.1:9443,site-c/p-site-c,site-u/p-site-u"
	require.Eventually(t, func() bool { return siteView(a, "prod") == want }, 10*time.Second, 20*time.Millisecond, "%s", siteView(a, "prod"))
	require.Equal(t, []sites.SiteKey{{Site: "site-c", Fingerprint: fingerprintOf(keyC)}}, withoutSince(a.View("prod").SiteKeys),
		"site C is held to its key, site U (unsigned) to none")
	require.True(t, a.View("prod").OpenKeys)
	// U holds C to its key too before anything is forged: a site that has
	// not yet seen C's signed records would take the first forged one as
	// C's (the first key a site of an open network is seen with binds it).
	require.Eventually(t, func() bool {
		return slices.Contains(withoutSince(u.View("prod").SiteKeys), sites.SiteKey{Site: "site-c", Fingerprint: fingerprintOf(keyC)})
	}, 10*time.Second, 20*time.Millisecond, "site U never held site C to its key")
	held, ok := a.store.Get(record.Key{Network: "prod", Site: "site-u", Kind: KindProviders})
	require.True(t, ok)
	require.False(t, record.Signed(&held), "an upstream site's records are taken unsigned")

	keyX := recordKey(t)
	x := start("site-x", keyX)
	require.Empty(t, x.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool { return len(x.aliveNodes("")) == 3 }, 10*time.Second, 20*time.Millisecond)
	send := x.sender(t)
	now := uint64(time.Now().Add(time.Minute).UnixNano())
	forgedSite := Record{Network: "prod", Site: "site-c", Kind: KindSite, Version: now, GatewayAddress: "127.9.9.9:443"}
	forgedProviders := Record{Network: "prod", Site: "site-c", Kind: KindProviders, Version: now, Providers: providers("p-site-c", "gpt-evil")}
	signedByX := func(r Record) Record {
		require.NoError(t, r.SignOpen(keyX))
		return r
	}
	send(forgedSite, forgedProviders)                       // unsigned
	send(signedByX(forgedSite), signedByX(forgedProviders)) // rebound_key
	real, ok := a.store.Get(forgedProviders.Key())
	require.True(t, ok)
	real.Providers, real.Version = forgedProviders.Providers, now+1
	send(real) // bad_signature: C's key, C's signature, another body

	for _, reason := range []string{record.RejectUnsigned, record.RejectReboundKey, record.RejectBadSignature} {
		for _, s := range []*testSite{a, u} {
			require.Eventually(t, func() bool { return s.counter("grid_swim_records_rejected_total", reason) > 0 }, 10*time.Second, 20*time.Millisecond,
				"%s never counted %s", s.Site(), reason)
		}
	}
	require.Equal(t, want, siteView(a, "prod"))
	require.Equal(t, 1, strings.Count(a.logs.String(), `"site":"site-c","network":"prod","kind":"site","reason":"rebound_key"`)+
		strings.Count(a.logs.String(), `"site":"site-c","network":"prod","kind":"providers","reason":"rebound_key"`), "said once")
	require.NotContains(t, a.logs.String(), "127.9.9.9")

	// C's own next update lands: nothing forged holds a version above it.
	require.NoError(t, c.Publish("prod", "", providers("p-site-c", "p-site-c-2")))
	require.Eventually(t, func() bool { return strings.Contains(siteView(a, "prod"), "site-c/p-site-c-2") }, 10*time.Second, 20*time.Millisecond)
}

func withoutSince(keys []sites.SiteKey) []sites.SiteKey {
	out := make([]sites.SiteKey, 0, len(keys))
	for _, k := range keys {
		k.Since = time.Time{}
		out = append(out, k)
	}
	return out
}

// The keys a site holds the others to outlive its restart (the agent
// keeps them in the network's status and gives them back): a key holder
// that reaches the restarted site before C does is still refused. C,
// given a new key, is refused too, until the site's operator resets C's
// key there: C's records are then taken, under the new key, and the
// copies of C's old records another site passes on bind nothing.
func TestSiteKeysOutliveARestartUntilReset(t *testing.T) {
	key := randomKey(t)
	keyC := recordKey(t)
	a := startSite(t, "site-a", withKey(key), withIdentity("prod", sites.Identity{Open: true}))
	a.waitRunning(t)
	c := startSite(t, "site-c", withKey(key), withIdentity("prod", sites.Identity{Open: true, RecordKey: keyC}))
	c.waitRunning(t)
	require.Empty(t, c.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	c.SetGatewayAddress("127.0.0.1:8443")
	require.NoError(t, c.Publish("prod", "", providers("p-site-c")))
	require.Eventually(t, func() bool { return len(a.View("prod").SiteKeys) == 1 }, 10*time.Second, 20*time.Millisecond)
	kept := a.View("prod").SiteKeys
	c.stop()
	a.stop()

	// Site A restarted, given the keys it kept; a key holder reaches it
	// first.
	a2 := startSite(t, "site-a", withKey(key), withIdentity("prod", sites.Identity{Open: true, SiteKeys: kept}))
	a2.waitRunning(t)
	require.Equal(t, kept, a2.View("prod").SiteKeys)
	keyX := recordKey(t)
	x := startSite(t, "site-x", withKey(key), withIdentity("prod", sites.Identity{Open: true, RecordKey: keyX}))
	x.waitRunning(t)
	require.Empty(t, x.AnnounceSeeds("prod", []string{a2.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool { return len(x.aliveNodes("")) == 1 }, 10*time.Second, 20*time.Millisecond)
	forged := Record{Network: "prod", Site: "site-c", Kind: KindSite, Version: uint64(time.Now().UnixNano()), GatewayAddress: "127.9.9.9:443"}
	require.NoError(t, forged.SignOpen(keyX))
	x.sender(t)(forged)
	require.Eventually(t, func() bool { return a2.counter("grid_swim_records_rejected_total", record.RejectReboundKey) > 0 }, 10*time.Second, 20*time.Millisecond)
	require.NotContains(t, siteView(a2, "prod"), "site-c")

	// C comes back with a new key (its own was lost): refused, until A's
	// operator resets C's key.
	keyC2 := recordKey(t)
	c2 := startSite(t, "site-c", withKey(key), withIdentity("prod", sites.Identity{Open: true, RecordKey: keyC2}))
	c2.waitRunning(t)
	require.Empty(t, c2.AnnounceSeeds("prod", []string{a2.AdvertiseAddr()}).Failed)
	c2.SetGatewayAddress("127.0.0.1:8444")
	require.NoError(t, c2.Publish("prod", "", providers("p-site-c")))
	require.Eventually(t, func() bool { return a2.counter("grid_swim_records_rejected_total", record.RejectReboundKey) > 1 }, 10*time.Second, 20*time.Millisecond)
	require.NotContains(t, siteView(a2, "prod"), "site-c@")

	// A copy of C's old record, as another site still holding it passes
	// it on, does not take C's key back after the reset. C is stopped
	// first and the copy signed after: C's own records (X holds them too)
	// are then all older than the copy, so the copy is refused for its key
	// (before_reset, or rebound_key when X passed C's records on first and
	// bound its new key), never merely not newer than a refreshed record.
	c2.stop()
	old := Record{Network: "prod", Site: "site-c", Kind: KindSite, Version: uint64(time.Now().UnixNano()), GatewayAddress: "127.0.0.1:8443"}
	require.NoError(t, old.SignOpen(keyC))
	reboundBefore := a2.counter("grid_swim_records_rejected_total", record.RejectReboundKey)
	require.True(t, a2.ResetSiteKey("prod", "site-c"))
	// Sent only to the members X sees alive: on a loaded machine A may be
	// suspected a moment, and the record would go nowhere.
	require.Eventually(t, func() bool { return len(x.aliveNodes("")) > 0 }, 30*time.Second, 20*time.Millisecond)
	x.sender(t)(old)
	require.Eventually(t, func() bool {
		return a2.counter("grid_swim_records_rejected_total", record.RejectBeforeReset) > 0 ||
			a2.counter("grid_swim_records_rejected_total", record.RejectReboundKey) > reboundBefore
	}, 30*time.Second, 20*time.Millisecond)
	if fp, ok := a2.trustOf("prod").Keys.Bound("site-c"); ok {
		require.Equal(t, fingerprintOf(keyC2), fp, "the old copy bound C's old key again")
	}

	// C, back under its new key, reaches A with the next exchange.
	c3 := startSite(t, "site-c", withKey(key), withIdentity("prod", sites.Identity{Open: true, RecordKey: keyC2}))
	c3.waitRunning(t)
	require.Empty(t, c3.AnnounceSeeds("prod", []string{a2.AdvertiseAddr()}).Failed)
	c3.SetGatewayAddress("127.0.0.1:8444")
	require.NoError(t, c3.Publish("prod", "", providers("p-site-c")))
	require.Eventually(t, func() bool {
		return strings.Contains(siteView(a2, "prod"), "site-c@127.0.0.1:8444") && strings.Contains(siteView(a2, "prod"), "site-c/p-site-c")
	}, 15*time.Second, 50*time.Millisecond, "%s", siteView(a2, "prod"))
	fp, ok := a2.trustOf("prod").Keys.Bound("site-c")
	require.True(t, ok)
	require.Equal(t, fingerprintOf(keyC2), fp)
	require.False(t, a2.ResetSiteKey("prod", "site-z"), "a site held to no key")
}
