package gossip

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/test/testpki"
)

// identityOf is site's identity from ca, as the agent hands it to gossip.
func identityOf(t *testing.T, ca *testpki.GridCA, site string) sites.Identity {
	return sites.Identity{Roots: ca.Roots, RootCerts: []*x509.Certificate{ca.Cert}, Signer: ca.SiteLeaf(t, site, testpki.SiteLeafOpts{})}
}

// signedBy is rec signed with c, as a site holding c would sign it.
func signedBy(t *testing.T, c *tls.Certificate, rec Record) Record {
	t.Helper()
	require.NoError(t, rec.Sign(c))
	return rec
}

func withIdentity(network string, id sites.Identity) siteOption {
	return func(c *siteSetup) {
		if c.identities == nil {
			c.identities = map[string]sites.Identity{}
		}
		c.identities[network] = id
	}
}

func withClock(now func() time.Time) siteOption { return func(c *siteSetup) { c.Now = now } }

// The attack of the site identity issue, on real gossip: a fourth process
// holding the SWIM key and a certificate of its own (site-x) writes site
// C's records at the end of time with a forged gateway and an injected
// provider, signs them with its own certificate, with another CA's
// certificate for C, or alters C's real record; and invents fifty sites.
// Every other site's view of C is unchanged, nothing invented appears,
// each forgery is counted by its reason and said once, and C's own next
// update still lands.
func TestAKeyHolderCannotSpeakForAnotherSite(t *testing.T) {
	ca, other := testpki.NewGridCA(t), testpki.NewGridCA(t)
	key := randomKey(t)
	start := func(site string) *testSite {
		s := startSite(t, site, withKey(key), withIdentity("prod", identityOf(t, ca, site)))
		s.waitRunning(t)
		return s
	}
	a, b, c := start("site-a"), start("site-b"), start("site-c")
	for _, s := range []*testSite{b, c} {
		require.Empty(t, s.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	}
	c.SetGatewayAddress("127.0.0.1:8443")
	for _, s := range []*testSite{a, b, c} {
		require.NoError(t, s.Publish("prod", "", providers("p-"+s.Site())))
	}
	cView := func(s *testSite) string {
		v := s.View("prod")
		var out []string
		for _, st := range v.Sites {
			out = append(out, st.Name+"@"+st.GatewayAddress)
		}
		return strings.Join(append(out, remoteNames(v)...), ",")
	}
	want := map[*testSite]string{
		a: "site-b@,site-c@127.0.0.1:8443,site-b/p-site-b,site-c/p-site-c",
		b: "site-a@,site-c@127.0.0.1:8443,site-a/p-site-a,site-c/p-site-c",
	}
	for s, w := range want {
		require.Eventually(t, func() bool { return cView(s) == w }, 10*time.Second, 20*time.Millisecond, "%s: %s", s.Site(), cView(s))
	}

	x := start("site-x")
	require.Empty(t, x.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	x.mu.Lock()
	ml := x.ml
	x.mu.Unlock()
	require.Eventually(t, func() bool { return len(x.aliveNodes("")) == 3 }, 10*time.Second, 20*time.Millisecond)
	targets := x.aliveNodes("")
	send := func(rs ...Record) {
		msg, err := record.EncodeDirectRecords(rs)
		require.NoError(t, err)
		for _, n := range targets {
			require.NoError(t, ml.SendReliable(n, msg))
		}
	}
	// A minute ahead (within the skew allowed): newer than anything C
	// signed, even what it signs again after this point, so that every
	// forgery is checked and counted by its reason, none set aside as
	// older than what is held.
	now := uint64(time.Now().Add(time.Minute).UnixNano())
	forgedSite := Record{Network: "prod", Site: "site-c", Kind: KindSite, Version: now, GatewayAddress: "127.9.9.9:443"}
	forgedProviders := Record{Network: "prod", Site: "site-c", Kind: KindProviders, Version: now, Providers: providers("p-site-c", "gpt-evil")}
	atTheEnd := func(r Record) Record { r.Version = math.MaxUint64; return r }
	own := x.identityCert(t, "prod")
	send(atTheEnd(forgedSite), atTheEnd(forgedProviders))                                   // from_future
	send(forgedSite, forgedProviders)                                                       // unsigned
	send(signedBy(t, own, forgedSite), signedBy(t, own, forgedProviders))                   // wrong_site
	cOfAnotherCA := other.SiteLeaf(t, "site-c", testpki.SiteLeafOpts{})                     //
	send(signedBy(t, cOfAnotherCA, forgedSite), signedBy(t, cOfAnotherCA, forgedProviders)) // untrusted_certificate
	real, ok := a.store.Get(forgedProviders.Key())
	require.True(t, ok)
	real.Providers, real.Version = forgedProviders.Providers, now+1
	send(real) // bad_signature
	var invented []Record
	for i := range 50 {
		r := Record{Network: "prod", Site: fmt.Sprintf("inv-%d", i), Kind: KindProviders, Version: now, Providers: providers("gpt-evil")}
		invented = append(invented, r, signedBy(t, own, r))
	}
	send(invented...) // unsigned and wrong_site

	for _, reason := range []string{record.RejectFromFuture, record.RejectUnsigned, record.RejectWrongSite, record.RejectUntrusted, record.RejectBadSignature} {
		for _, s := range []*testSite{a, b} {
			require.Eventually(t, func() bool { return s.counter("grid_swim_records_rejected_total", reason) > 0 }, 10*time.Second, 20*time.Millisecond,
				"%s never counted %s", s.Site(), reason)
		}
	}
	require.Eventually(t, func() bool { return a.counter("grid_swim_records_rejected_total", record.RejectUnsigned) >= 52 }, 10*time.Second, 20*time.Millisecond)
	for s, w := range want {
		require.Equal(t, w, cView(s), s.Site())
		for _, line := range strings.Split(s.logs.String(), "\n") {
			require.NotContains(t, line, "127.9.9.9", "a forged address reaches no log")
		}
		// Said once per site and reason, however many were sent.
		require.Equal(t, 1, strings.Count(s.logs.String(), `"site":"site-c","network":"prod","kind":"site","reason":"unsigned"`)+
			strings.Count(s.logs.String(), `"site":"site-c","network":"prod","kind":"providers","reason":"unsigned"`))
	}

	// C's own next update lands: nothing forged holds a version above it.
	require.NoError(t, c.Publish("prod", "", providers("p-site-c", "p-site-c-2")))
	require.Eventually(t, func() bool { return strings.Contains(cView(a), "site-c/p-site-c-2") }, 10*time.Second, 20*time.Millisecond)
}

// identityCert is the certificate a test site signs a network's records
// with.
func (s *testSite) identityCert(t *testing.T, network string) *tls.Certificate {
	t.Helper()
	id, ok := s.identities[network]
	require.True(t, ok, "%s was given no identity in %s", s.Site(), network)
	require.NotNil(t, id.Signer)
	return id.Signer
}

// A record captured before its site withdrew it, replayed after the
// tombstone expired, stays withdrawn: it is older than the tombstone
// lifetime (on the old code it came back Alive and was never corrected).
func TestAWithdrawnRecordReplayedLaterStaysWithdrawn(t *testing.T) {
	ca := testpki.NewGridCA(t)
	key := randomKey(t)
	var ahead atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	a := startSite(t, "site-a", withKey(key), withIdentity("prod", identityOf(t, ca, "site-a")), withClock(clock))
	a.waitRunning(t)
	b := startSite(t, "site-b", withKey(key), withIdentity("prod", identityOf(t, ca, "site-b")))
	b.waitRunning(t)
	require.Empty(t, b.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	require.NoError(t, b.Publish("prod", "", providers("pb")))
	require.Eventually(t, func() bool { return slicesEqual(remoteNames(a.View("prod")), []string{"site-b/pb"}) }, 10*time.Second, 20*time.Millisecond)
	captured, ok := a.store.Get(record.Key{Network: "prod", Site: "site-b", Kind: KindProviders})
	require.True(t, ok)

	b.Forget("prod")
	require.Eventually(t, func() bool { return len(a.View("prod").Providers) == 0 }, 10*time.Second, 20*time.Millisecond)
	// The tombstone lifetime and the clock skew pass on site A's clock:
	// the tombstone expires.
	ahead.Store(int64(a.cfg.TombstoneTTL + record.MaxClockSkew + time.Second))
	require.Eventually(t, func() bool { _, held := a.store.Get(captured.Key()); return !held }, 10*time.Second, 20*time.Millisecond)

	b.mu.Lock()
	ml := b.ml
	b.mu.Unlock()
	msg, err := record.EncodeDirectRecords([]Record{captured})
	require.NoError(t, err)
	require.NoError(t, ml.SendReliable(b.aliveNodes("")[0], msg))
	require.Eventually(t, func() bool { return a.counter("grid_swim_records_rejected_total", record.RejectTooOld) > 0 }, 10*time.Second, 20*time.Millisecond)
	require.Empty(t, a.View("prod").Providers, "the withdrawn provider stays withdrawn")
}

// A site whose certificate is renewed while its records keep changing
// never disappears from another site's view; its records are signed with
// the new certificate from then on.
func TestARenewedCertificateNeverDropsASite(t *testing.T) {
	ca := testpki.NewGridCA(t)
	key := randomKey(t)
	a := startSite(t, "site-a", withKey(key), withIdentity("prod", identityOf(t, ca, "site-a")))
	a.waitRunning(t)
	b := startSite(t, "site-b", withKey(key), withIdentity("prod", identityOf(t, ca, "site-b")))
	b.waitRunning(t)
	require.Empty(t, b.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	require.NoError(t, b.Publish("prod", "", providers("pb-0")))
	require.Eventually(t, func() bool { return len(a.View("prod").Providers) == 1 }, 10*time.Second, 20*time.Millisecond)

	stop := make(chan struct{})
	publisher := make(chan struct{})
	go func() {
		defer close(publisher)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			_ = b.Publish("prod", "", providers(fmt.Sprintf("pb-%d", i)))
		}
	}()
	var lost atomic.Int64
	sampler := make(chan struct{})
	go func() {
		defer close(sampler)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if len(a.View("prod").Providers) != 1 {
				lost.Add(1)
			}
		}
	}()
	var last *tls.Certificate
	for range 3 {
		time.Sleep(300 * time.Millisecond)
		last = ca.SiteLeaf(t, "site-b", testpki.SiteLeafOpts{})
		b.SetIdentity("prod", sites.Identity{Roots: ca.Roots, Signer: last})
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-publisher
	<-sampler
	require.Zero(t, lost.Load(), "site A lost site B's providers during a renewal")
	require.Zero(t, a.total("grid_swim_records_rejected_total"), "nothing was refused")
	require.Eventually(t, func() bool {
		r, ok := a.store.Get(record.Key{Network: "prod", Site: "site-b", Kind: KindSite})
		return ok && string(r.Chain[0]) == string(last.Certificate[0])
	}, 10*time.Second, 20*time.Millisecond, "the site record is signed with the new certificate")
}

// total sums a metric over its labels.
func (s *testSite) total(name string) float64 {
	mfs, _ := s.reg.Gather()
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// A site whose certificate expires (its renewal refused, say) leaves
// every other site's view: what it signed before is dropped, what it
// signs after is refused.
func TestASiteLeavesTheViewWhenItsCertificateExpires(t *testing.T) {
	ca := testpki.NewGridCA(t)
	key := randomKey(t)
	a := startSite(t, "site-a", withKey(key), withIdentity("prod", identityOf(t, ca, "site-a")))
	a.waitRunning(t)
	now := time.Now()
	short := ca.SiteLeaf(t, "site-b", testpki.SiteLeafOpts{NotBefore: now.Add(-time.Minute), NotAfter: now.Add(3 * time.Second)})
	b := startSite(t, "site-b", withKey(key), withIdentity("prod", sites.Identity{Roots: ca.Roots, Signer: short}))
	b.waitRunning(t)
	require.Empty(t, b.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	require.NoError(t, b.Publish("prod", "", providers("pb")))
	require.Eventually(t, func() bool { return len(a.View("prod").Providers) == 1 }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return len(a.View("prod").Sites) == 0 && len(a.View("prod").Providers) == 0 }, 15*time.Second, 50*time.Millisecond,
		"site B is still known after its certificate expired: %+v", a.View("prod"))
	require.Positive(t, a.counter("grid_swim_records_rejected_total", record.RejectNoLongerValid))
	require.NoError(t, b.Publish("prod", "", providers("pb", "pb2")))
	require.Eventually(t, func() bool { return a.counter("grid_swim_records_rejected_total", record.RejectUntrusted) > 0 }, 10*time.Second, 20*time.Millisecond)
	require.Empty(t, a.View("prod").Providers)
}

// Setting the same identity again (the controller does at every
// reconcile) signs and sends nothing again, in an open network as in a
// signed one.
func TestTheSameIdentityAgainSendsNothing(t *testing.T) {
	ca := testpki.NewGridCA(t)
	signed := identityOf(t, ca, "site-a")
	a := startSite(t, "site-a", withKey(randomKey(t)), inNetworks("open"), withIdentity("prod", signed))
	a.waitRunning(t)
	require.NoError(t, a.Publish("open", "", providers("po")))
	require.NoError(t, a.Publish("prod", "", providers("pp")))
	versions := func() map[record.Key]uint64 {
		out := map[record.Key]uint64{}
		for _, r := range a.store.OfSite("site-a") {
			out[r.Key()] = r.Version
		}
		return out
	}
	before := versions()
	require.Len(t, before, 4)
	for range 3 {
		a.SetIdentity("open", sites.Identity{Open: true})
		a.SetIdentity("prod", signed)
	}
	require.Equal(t, before, versions())
}
