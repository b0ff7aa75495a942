package record

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/sites"
)

func TestStoreLastWriterWins(t *testing.T) {
	s := NewStore()
	now := time.Unix(100, 0)
	r1 := Record{Network: "n", Site: "a", Kind: KindProviders, Version: 10, Providers: providers("p1")}
	r2 := Record{Network: "n", Site: "a", Kind: KindProviders, Version: 20, Providers: providers("p2")}
	require.True(t, s.Merge(r2, now))
	require.False(t, s.Merge(r1, now), "an older version never replaces a newer one")
	got, _ := s.Get(r1.Key())
	require.Equal(t, "p2", got.Providers[0].Name)
	require.False(t, s.Merge(r2, now), "the same version twice is no news")

	// Equal versions, different content: every replica picks the same.
	x := Record{Network: "n", Site: "b", Kind: KindSite, Version: 5, GatewayAddress: "a:1"}
	y := Record{Network: "n", Site: "b", Kind: KindSite, Version: 5, GatewayAddress: "b:1"}
	s1, s2 := NewStore(), NewStore()
	s1.Merge(x, now)
	s1.Merge(y, now)
	s2.Merge(y, now)
	s2.Merge(x, now)
	g1, _ := s1.Get(x.Key())
	g2, _ := s2.Get(x.Key())
	require.Equal(t, g1, g2)
}

func TestStoreDigestAndTombstones(t *testing.T) {
	s := NewStore()
	now := time.Unix(100, 0)
	s.Merge(Record{Network: "n", Site: "a", Kind: KindSite, Version: 3}, now)
	s.Merge(Record{Network: "n", Site: "b", Kind: KindSite, Version: 7}, now)
	s.Merge(Record{Network: "m", Site: "b", Kind: KindProviders, Version: 1}, now)

	digest := []DigestEntry{{"n", "a", KindSite, 3}, {"n", "b", KindSite, 2}}
	missing := s.MissingFrom(digest, []string{"m", "n"})
	require.Len(t, missing, 2, "an older version and an unknown record are sent")
	require.Equal(t, "m", missing[0].Network)
	require.Equal(t, uint64(7), missing[1].Version)
	missing = s.MissingFrom(digest, []string{"n"})
	require.Len(t, missing, 1, "only the records of the peer's networks are sent")
	require.Equal(t, "n", missing[0].Network)

	s.Merge(Record{Network: "n", Site: "a", Kind: KindSite, Version: 4, Deleted: true}, now)
	require.Zero(t, s.Expire(now.Add(time.Minute), 2*time.Minute))
	require.Equal(t, 1, s.Expire(now.Add(3*time.Minute), 2*time.Minute))
	_, ok := s.Get(Key{"n", "a", KindSite})
	require.False(t, ok)

	// A tombstone written now is kept until what it withdrew is too old
	// to be taken anywhere: the lifetime and the clock skew after it was
	// written, however early it was first seen.
	s.Merge(Record{Network: "n", Site: "c", Kind: KindSite, Version: uint64(now.UnixNano()), Deleted: true}, now)
	require.Zero(t, s.Expire(now.Add(2*time.Minute), 2*time.Minute))
	require.Zero(t, s.Expire(now.Add(2*time.Minute+MaxClockSkew-time.Second), 2*time.Minute))
	require.Equal(t, 1, s.Expire(now.Add(2*time.Minute+MaxClockSkew), 2*time.Minute))

	require.Equal(t, []string{"m", "n"}, s.DropSite("b"))
	require.Zero(t, s.Count())
}

func TestVersionClockNeverGoesBack(t *testing.T) {
	at := time.Unix(100, 0)
	c := VersionClock{Now: func() time.Time { return at }}
	v1 := c.Next()
	at = at.Add(-time.Hour) // the wall clock stepped back
	v2 := c.Next()
	require.Greater(t, v2, v1)
}

func TestClassifyPEM(t *testing.T) {
	require.Equal(t, CertNone, ClassifyPEM(""))
	require.Equal(t, CertValid, ClassifyPEM("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"))
	require.Equal(t, CertInvalid, ClassifyPEM("junk"))
	require.Equal(t, CertPrivateKey, ClassifyPEM("-----BEGIN CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----"))
	require.Equal(t, CertPrivateKey, ClassifyPEM("-----BEGIN RSA PRIVATE KEY-----"))
}

// The decoder takes any bytes: it never panics, and what it accepts is
// within bounds.
func FuzzDecode(f *testing.F) {
	rec, _ := EncodeRecords([]Record{{Network: "n", Site: "a", Kind: KindProviders, Version: 1, Providers: providers("p")}})
	dig, _ := EncodeDigest("a/1", []DigestEntry{{"n", "a", KindSite, 2}}, nil, time.Now())
	note, _ := EncodeNotice(Notice{Member: "a/1", Suspect: true, At: 3})
	for _, seed := range [][]byte{rec, dig, note, {}, {1}, {2, '{'}, {3, 'n', 'u', 'l', 'l'}, {9}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			require.Contains(t, DropReasons, DropReason(err))
			return
		}
		for _, r := range m.Records {
			require.NoError(t, checkRecord(&r))
			require.LessOrEqual(t, len(r.CertPEM), maxCertPEMBytes)
		}
		require.LessOrEqual(t, len(m.Digest.Entries), maxDigestsPerMsg)
	})
}

func TestMetaRoundTrip(t *testing.T) {
	m := NodeMeta{V: MetaVersion, Site: "site-a", Generation: 42, Grid: GridID{ID: NewGridID(), By: "site-a", At: 1796100000}}
	got, err := DecodeMeta(m.Encode())
	require.NoError(t, err)
	require.Equal(t, m, got)
	require.Less(t, len(m.Encode()), 512, "memberlist's metadata limit")
	_, err = DecodeMeta([]byte(`{"v":2,"s":"a"}`))
	require.ErrorContains(t, err, "identity schema")
	require.Equal(t, "site-a", SiteOfMember(MemberName("site-a", 7)))
}

func TestNegotiateGridID(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	settle := time.Minute
	old := now.Add(-time.Hour).Unix()
	young := now.Add(-time.Second).Unix()
	x := GridID{ID: "x", By: "site-b", At: old}
	y := GridID{ID: "y", By: "site-a", At: old}
	none := GridID{}

	got, err := Negotiate(none, x, now, settle)
	require.NoError(t, err)
	require.Equal(t, x, got, "a site with none adopts")
	got, err = Negotiate(x, none, now, settle)
	require.NoError(t, err)
	require.Equal(t, x, got, "a peer with none changes nothing")
	got, err = Negotiate(x, x, now, settle)
	require.NoError(t, err)
	require.Equal(t, x, got)
	_, err = Negotiate(x, y, now, settle)
	require.ErrorIs(t, err, ErrGridIDConflict, "two established grids never merge")

	// Both new: the smaller generating site's wins, on both sides alike.
	yx := GridID{ID: "x", By: "site-b", At: young}
	yy := GridID{ID: "y", By: "site-a", At: young}
	a, err := Negotiate(yx, yy, now, settle)
	require.NoError(t, err)
	b, err := Negotiate(yy, yx, now, settle)
	require.NoError(t, err)
	require.Equal(t, yy, a)
	require.Equal(t, yy, b)
	// A new one never takes over an established one.
	_, err = Negotiate(x, yy, now, settle)
	require.ErrorIs(t, err, ErrGridIDConflict)
}

// A signals record round-trips, and a malformed one is dropped on
// receipt: no other kind's fields, bounded, no negative age.
func TestSignalsRecordsAreBoundedOnReceipt(t *testing.T) {
	good := Record{Network: "n", Site: "a", Kind: KindSignals, Version: 1,
		Signals: []sites.Signal{{Provider: "p", Metric: "grid_provider_ready", Value: 1, AgeMs: 20, Labels: map[string]string{"name": "pool"}}}}
	b, err := EncodeRecords([]Record{good})
	require.NoError(t, err)
	m, err := Decode(b)
	require.NoError(t, err)
	require.Len(t, m.Records, 1)
	require.NoError(t, checkRecord(&m.Records[0]))
	require.Equal(t, good.Signals, m.Records[0].Signals)

	for name, mutate := range map[string]func(*Record){
		"negative age":   func(r *Record) { r.Signals[0].AgeMs = -1 },
		"no provider":    func(r *Record) { r.Signals[0].Provider = "" },
		"with providers": func(r *Record) { r.Providers = providers("p") },
		"with a gateway": func(r *Record) { r.GatewayAddress = "127.0.0.1:1" },
		"too many": func(r *Record) {
			for range MaxSignals {
				r.Signals = append(r.Signals, r.Signals[0])
			}
		},
	} {
		r := good
		r.Signals = append([]sites.Signal(nil), good.Signals...)
		mutate(&r)
		require.Error(t, checkRecord(&r), name)
	}
	providersRecord := Record{Network: "n", Site: "a", Kind: KindProviders, Version: 1, Providers: providers("p"), Signals: good.Signals}
	require.Error(t, checkRecord(&providersRecord), "signals in a providers record")
	// A site record's region and zone are bounded and belong to it alone.
	site := Record{Network: "n", Site: "a", Kind: KindSite, Version: 1, Region: "us-east-1", Zone: "us-east-1a"}
	require.NoError(t, checkRecord(&site))
	long := site
	long.Zone = strings.Repeat("z", maxLabelBytes+1)
	require.Error(t, checkRecord(&long), "a zone longer than a label")
	misplaced := Record{Network: "n", Site: "a", Kind: KindProviders, Version: 1, Providers: providers("p"), Region: "us-east-1"}
	require.Error(t, checkRecord(&misplaced), "a region in a providers record")
}

// providers are providers of the given names, as a site announces them.
func providers(names ...string) []sites.Provider {
	var out []sites.Provider
	for _, n := range names {
		out = append(out, sites.Provider{Name: n, Models: []string{"m-" + n}, Cluster: "c-" + n, Phase: "Available"})
	}
	return out
}
