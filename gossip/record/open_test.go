package record

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/test/testpki"
)

func newOpenKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return k
}

func openRecord(now time.Time) Record {
	return Record{Network: "open", Site: "site-c", Kind: KindSite, Version: uint64(now.UnixNano()), GatewayAddress: "10.0.0.3:443", Grid: "g"}
}

func openTrust() *NetworkTrust {
	return &NetworkTrust{Open: true, Keys: NewSiteKeys(), Network: "open"}
}

// An open network's record carries its site's key and a signature over
// every field and the key: a change to any of them, or a key of another
// shape, does not verify; a record without a signature is judged by
// whether its site is held to a key.
func TestOpenRecordSignature(t *testing.T) {
	now := time.Now()
	key := newOpenKey(t)
	tr := openTrust()
	check := func(r Record) string { return Check(tr, &r, "g", now, 10*time.Minute) }

	r := openRecord(now)
	require.NoError(t, r.SignOpen(key))
	require.Len(t, r.Chain, 1)
	require.Equal(t, []byte(key.Public().(ed25519.PublicKey)), r.Chain[0])
	require.Empty(t, check(r))

	for name, change := range map[string]func(*Record){
		"gateway":   func(r *Record) { r.GatewayAddress = "127.9.9.9:443" },
		"version":   func(r *Record) { r.Version++ },
		"site":      func(r *Record) { r.Site = "site-d" },
		"grid":      func(r *Record) { r.Grid = "" },
		"deleted":   func(r *Record) { r.Deleted = true },
		"other key": func(r *Record) { r.Chain = [][]byte{newOpenKey(t).Public().(ed25519.PublicKey)} },
		"short key": func(r *Record) { r.Chain = [][]byte{r.Chain[0][:16]} },
		"two keys":  func(r *Record) { r.Chain = append(r.Chain, r.Chain[0]) },
		"no key":    func(r *Record) { r.Chain = nil },
		"signature": func(r *Record) { r.Sig = bytes.Repeat([]byte{1}, ed25519.SignatureSize) },
		"short sig": func(r *Record) { r.Sig = r.Sig[:10] },
		"no sig":    func(r *Record) { r.Sig = nil },
		"providers": func(r *Record) { r.Providers = []sites.Provider{{Name: "gpt-evil"}} },
		"bundle":    func(r *Record) { r.TrustBundle = []byte("x") },
	} {
		forged := r
		forged.Chain = append([][]byte(nil), r.Chain...)
		change(&forged)
		require.Equal(t, RejectBadSignature, check(forged), name)
	}

	// The signature is over the open context and the key, then the
	// encoding a network with a grid CA signs: neither is taken for the
	// other.
	msg, err := signedBytes(&r)
	require.NoError(t, err)
	require.False(t, ed25519.Verify(key.Public().(ed25519.PublicKey), msg, r.Sig), "an open signature is not one over signedBytes")
	open, err := openSignedBytes(&r, r.Chain[0])
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(open, []byte(openSigningContext)))
	require.True(t, bytes.HasSuffix(open, msg))
	require.True(t, bytes.Contains(open, r.Chain[0]))

	// An open network's record in a network with a grid CA is refused
	// (its key is no certificate).
	signedNet := trustOf(testpki.NewGridCA(t))
	require.Equal(t, RejectBadCertificate, Check(signedNet, &r, "g", now, 10*time.Minute))

	unsigned := openRecord(now)
	require.Empty(t, check(unsigned), "a site held to no key may not sign (an upstream Grid site)")
}

// A site is held to the first key whose record was kept: records of it
// signed with another key, or not signed, are refused from then on;
// after a reset, the next key to sign a record of the site is bound, the
// key reset only by a record signed after the reset (not by the copies
// other sites pass on).
func TestSiteKeysHoldASiteToItsFirstKey(t *testing.T) {
	now := time.Now()
	first, second := newOpenKey(t), newOpenKey(t)
	tr := openTrust()
	kept := map[Kind]Record{}
	admit := func(r Record) string {
		if why := Check(tr, &r, "g", now, 10*time.Minute); why != "" {
			return why
		}
		refused, full, _ := tr.Keys.Admit(&r, now, func() {
			for k, held := range kept {
				if !Signed(&held) {
					delete(kept, k)
				}
			}
		}, func() bool { kept[r.Kind] = r; return true })
		require.False(t, full)
		return refused
	}
	signed := func(key ed25519.PrivateKey, at time.Time, kind Kind) Record {
		r := openRecord(at)
		r.Kind = kind
		if kind != KindSite {
			r.GatewayAddress = ""
		}
		require.NoError(t, r.SignOpen(key))
		return r
	}

	// An unsigned record of a site held to no key is kept, and does not
	// bind; the first signed one binds and drops it.
	require.Empty(t, admit(openRecord(now)))
	_, bound := tr.Keys.Bound("site-c")
	require.False(t, bound)
	unsignedProviders := openRecord(now)
	unsignedProviders.Kind, unsignedProviders.GatewayAddress = KindProviders, ""
	require.Empty(t, admit(unsignedProviders))
	require.Empty(t, admit(signed(first, now, KindSite)))
	fp, bound := tr.Keys.Bound("site-c")
	require.True(t, bound)
	require.Equal(t, KeyFingerprint(first.Public().(ed25519.PublicKey)), fp)
	require.Len(t, kept, 1, "the unsigned records of the site went when its key was bound")

	require.Empty(t, admit(signed(first, now.Add(time.Second), KindProviders)))
	require.Equal(t, RejectReboundKey, admit(signed(second, now.Add(time.Second), KindSite)))
	require.Equal(t, RejectUnsigned, admit(openRecord(now.Add(time.Second))))
	list := tr.Keys.List()
	require.Len(t, list, 1)
	require.Equal(t, sites.SiteKey{Site: "site-c", Fingerprint: fp, Since: now}, list[0])

	// Reset: what is held of the site goes with the key.
	resetAt := now.Add(2 * time.Second)
	require.True(t, tr.Keys.Reset("site-c", resetAt, func() { clear(kept) }))
	require.Empty(t, kept)
	require.Equal(t, RejectBeforeReset, admit(signed(first, now.Add(time.Second), KindSite)), "a copy of the old key's record, signed before the reset")
	require.Empty(t, admit(signed(second, now.Add(time.Second), KindSite)), "the site's new key, signed before the reset")
	fp, _ = tr.Keys.Bound("site-c")
	require.Equal(t, KeyFingerprint(second.Public().(ed25519.PublicKey)), fp)
	require.Equal(t, RejectReboundKey, admit(signed(first, resetAt.Add(2*time.Second), KindSite)))

	// Reset again: the key reset binds again with a record signed after
	// the reset.
	require.True(t, tr.Keys.Reset("site-c", resetAt, func() { clear(kept) }))
	require.Equal(t, RejectBeforeReset, admit(signed(second, now.Add(time.Second), KindSite)))
	require.Empty(t, admit(signed(second, resetAt.Add(time.Second), KindSite)))
	require.False(t, tr.Keys.Reset("site-d", resetAt, func() {}), "a site held to no key")
}

// Keys kept before a restart are loaded for the sites held to none, the
// malformed ones skipped; no more than MaxSiteKeys are held, and a site
// beyond them is not bound.
func TestSiteKeysLoadAndBound(t *testing.T) {
	now := time.Now()
	a, b := newOpenKey(t), newOpenKey(t)
	k := NewSiteKeys()
	fa, fb := KeyFingerprint(a.Public().(ed25519.PublicKey)), KeyFingerprint(b.Public().(ed25519.PublicKey))
	k.Load([]sites.SiteKey{{Site: "site-a", Fingerprint: fa, Since: now}, {Site: "Not_A_Site", Fingerprint: fa},
		{Site: "site-b", Fingerprint: "sha256:" + fb}, {Site: "site-c", Fingerprint: fb[:10]}})
	require.Equal(t, []sites.SiteKey{{Site: "site-a", Fingerprint: fa, Since: now}}, k.List())
	k.Load([]sites.SiteKey{{Site: "site-a", Fingerprint: fb}})
	got, _ := k.Bound("site-a")
	require.Equal(t, fa, got, "a site held to a key keeps it")

	full := NewSiteKeys()
	var many []sites.SiteKey
	for i := range MaxSiteKeys + 10 {
		many = append(many, sites.SiteKey{Site: fmt.Sprintf("s-%d", i), Fingerprint: fa})
	}
	full.Load(many)
	require.Len(t, full.List(), MaxSiteKeys)
	r := openRecord(now)
	r.Site = "site-new"
	require.NoError(t, r.SignOpen(b))
	refused, isFull, bound := full.Admit(&r, now, func() {}, func() bool { t.Fatal("kept beyond the cap"); return false })
	require.Empty(t, refused)
	require.True(t, isFull)
	require.False(t, bound)
}

// Two records of one site signed with different keys, admitted at once
// on several workers: one key is bound, and only its records are kept.
func TestSiteKeysBindOneKeyUnderARace(t *testing.T) {
	now := time.Now()
	for range 20 {
		k := NewSiteKeys()
		keys := []ed25519.PrivateKey{newOpenKey(t), newOpenKey(t), newOpenKey(t), newOpenKey(t)}
		var mu sync.Mutex
		kept := map[string]bool{}
		var wg sync.WaitGroup
		for _, key := range keys {
			r := openRecord(now)
			require.NoError(t, r.SignOpen(key))
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, _ = k.Admit(&r, now, func() {}, func() bool {
					mu.Lock()
					kept[KeyFingerprint(r.Chain[0])] = true
					mu.Unlock()
					return true
				})
			}()
		}
		wg.Wait()
		require.Len(t, kept, 1)
		fp, _ := k.Bound("site-c")
		require.True(t, kept[fp])
	}
}
