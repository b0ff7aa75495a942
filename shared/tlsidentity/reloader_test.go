package tlsidentity_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/tlsidentity"
	"github.com/gridsync/gridsync/test/testpki"
)

type fixture struct {
	root *testpki.Issuer
	proj *testpki.Projection
	reg  *prometheus.Registry
	now  time.Time
	mu   sync.Mutex
}

func newFixture(t *testing.T) *fixture {
	return &fixture{root: testpki.NewRoot(t, "root"), proj: testpki.NewProjection(t), reg: prometheus.NewRegistry(), now: time.Now()}
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

func (f *fixture) publishLeaf(t *testing.T, name string, o testpki.Opts) {
	cert, key := f.root.Leaf(t, name, o)
	f.proj.Publish(map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": f.root.PEM})
}

func (f *fixture) options() tlsidentity.Options {
	return tlsidentity.Options{
		CertFile: f.proj.Path("tls.crt"), KeyFile: f.proj.Path("tls.key"), CAFile: f.proj.Path("ca.crt"),
		Interval: 20 * time.Millisecond, RequireServerAuth: true, Registerer: f.reg, Now: f.clock,
	}
}

// reloads reads one series of the reload counter.
func (f *fixture) reloads(material, result string) float64 {
	families, err := f.reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, fam := range families {
		if fam.GetName() != "gridsync_identity_reloads_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["material_type"] == material && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// server serves TLS with the reloader's identity and answers each line
// with the serial of the certificate its connection was set up with.
func server(t *testing.T, r *tlsidentity.Reloader) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: r.GetCertificate, MinVersion: tls.VersionTLS13})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				scanner := bufio.NewScanner(c)
				for scanner.Scan() {
					if _, err := c.Write([]byte(scanner.Text() + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, addr string, root *testpki.Issuer) (*tls.Conn, string) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(root.Cert)
	conn, err := (&tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS13}}).DialContext(context.Background(), "tcp", addr)
	require.NoError(t, err)
	tc := conn.(*tls.Conn)
	t.Cleanup(func() { _ = tc.Close() })
	return tc, tc.ConnectionState().PeerCertificates[0].Subject.CommonName
}

func echo(t *testing.T, c *tls.Conn, msg string) {
	t.Helper()
	_, err := c.Write([]byte(msg + "\n"))
	require.NoError(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, msg+"\n", line)
}

func TestARotationReachesNewHandshakesWithinOnePollAndSparesOpenConnections(t *testing.T) {
	f := newFixture(t)
	f.publishLeaf(t, "leaf-1", testpki.Opts{})
	r, err := tlsidentity.New(f.options())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	addr := server(t, r)

	open, name := dial(t, addr, f.root)
	assert.Equal(t, "leaf-1", name)

	f.publishLeaf(t, "leaf-2", testpki.Opts{})
	published := time.Now()
	require.Eventually(t, func() bool { return r.Current().Certificate.Leaf.Subject.CommonName == "leaf-2" }, time.Second, time.Millisecond)
	// One poll interval, plus slack for the scheduler of a loaded test machine.
	assert.Less(t, time.Since(published), 3*f.options().Interval, "active within one poll interval")

	_, name = dial(t, addr, f.root)
	assert.Equal(t, "leaf-2", name, "a new handshake gets the new leaf")
	echo(t, open, "still here")
	assert.Equal(t, "leaf-1", open.ConnectionState().PeerCertificates[0].Subject.CommonName)
	assert.Equal(t, 2.0, f.reloads("certificate", "success"))
}

func TestRejectedCandidatesKeepTheActiveIdentity(t *testing.T) {
	other := func(t *testing.T) ([]byte, []byte) {
		return testpki.NewRoot(t, "other-root").Leaf(t, "stranger", testpki.Opts{})
	}
	tests := []struct {
		name   string
		files  func(t *testing.T, f *fixture) map[string][]byte
		reason tlsidentity.Reason
	}{
		{"mismatched pair", func(t *testing.T, f *fixture) map[string][]byte {
			cert, _ := f.root.Leaf(t, "a", testpki.Opts{})
			_, key := f.root.Leaf(t, "b", testpki.Opts{})
			return map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": f.root.PEM}
		}, tlsidentity.ReasonMismatch},
		{"expired leaf", func(t *testing.T, f *fixture) map[string][]byte {
			cert, key := f.root.Leaf(t, "old", testpki.Opts{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
			return map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": f.root.PEM}
		}, tlsidentity.ReasonExpired},
		{"not yet valid leaf", func(t *testing.T, f *fixture) map[string][]byte {
			cert, key := f.root.Leaf(t, "future", testpki.Opts{NotBefore: time.Now().Add(time.Hour)})
			return map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": f.root.PEM}
		}, tlsidentity.ReasonNotYetValid},
		{"expired intermediate", func(t *testing.T, f *fixture) map[string][]byte {
			mid := f.root.Intermediate(t, "mid", testpki.Opts{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Minute)})
			cert, key := mid.Leaf(t, "via-mid", testpki.Opts{})
			return map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": f.root.PEM}
		}, tlsidentity.ReasonExpired},
		{"untrusted chain", func(t *testing.T, f *fixture) map[string][]byte {
			cert, key := other(t)
			return map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": f.root.PEM}
		}, tlsidentity.ReasonUntrusted},
		{"client-only leaf", func(t *testing.T, f *fixture) map[string][]byte {
			cert, key := f.root.Leaf(t, "client", testpki.Opts{ClientOnly: true})
			return map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": f.root.PEM}
		}, tlsidentity.ReasonNotServerAuth},
		{"garbage", func(t *testing.T, f *fixture) map[string][]byte {
			return map[string][]byte{"tls.crt": []byte("not a certificate"), "tls.key": []byte("nor a key"), "ca.crt": f.root.PEM}
		}, tlsidentity.ReasonUnparseable},
		{"empty key", func(t *testing.T, f *fixture) map[string][]byte {
			cert, _ := f.root.Leaf(t, "x", testpki.Opts{})
			return map[string][]byte{"tls.crt": cert, "tls.key": {}, "ca.crt": f.root.PEM}
		}, tlsidentity.ReasonEmpty},
		{"a valid leaf and 1,500 unrelated certificates", func(t *testing.T, f *fixture) map[string][]byte {
			cert, key := f.root.Leaf(t, "x", testpki.Opts{})
			stranger, _ := other(t)
			return map[string][]byte{"tls.crt": append(cert, bytes.Repeat(stranger, 1500)...), "tls.key": key, "ca.crt": f.root.PEM}
		}, tlsidentity.ReasonBadChain},
		{"a chain that does not chain", func(t *testing.T, f *fixture) map[string][]byte {
			cert, key := f.root.Leaf(t, "x", testpki.Opts{})
			stranger, _ := other(t)
			return map[string][]byte{"tls.crt": append(cert, stranger...), "tls.key": key, "ca.crt": f.root.PEM}
		}, tlsidentity.ReasonBadChain},
		{"a 1024-bit RSA key", func(t *testing.T, f *fixture) map[string][]byte {
			cert, key := f.root.Leaf(t, "weak", testpki.Opts{RSABits: 1024})
			return map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": f.root.PEM}
		}, tlsidentity.ReasonWeakKey},
		{"an intermediate with a P-521 key", func(t *testing.T, f *fixture) map[string][]byte {
			inter := f.root.Intermediate(t, "p521", testpki.Opts{Curve: elliptic.P521()})
			cert, key := inter.Leaf(t, "x", testpki.Opts{})
			return map[string][]byte{"tls.crt": append(cert, inter.PEM...), "tls.key": key, "ca.crt": f.root.PEM}
		}, tlsidentity.ReasonWeakKey},
		{"an expired CA bundle", func(t *testing.T, f *fixture) map[string][]byte {
			cert, key := f.root.Leaf(t, "x", testpki.Opts{})
			return map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": expiredRoot(t)}
		}, tlsidentity.ReasonExpired},
		{"oversized certificate", func(t *testing.T, f *fixture) map[string][]byte {
			cert, key := f.root.Leaf(t, "x", testpki.Opts{})
			return map[string][]byte{"tls.crt": append(cert, make([]byte, 2<<20)...), "tls.key": key, "ca.crt": f.root.PEM}
		}, tlsidentity.ReasonOversized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.publishLeaf(t, "good", testpki.Opts{})
			r, err := tlsidentity.New(f.options())
			require.NoError(t, err)
			addr := server(t, r)
			good := r.Current().Fingerprint

			f.proj.Publish(tt.files(t, f))
			for range 3 {
				r.Poll() // an identical failure, again and again
			}
			assert.Equal(t, good, r.Current().Fingerprint, "the previous identity is still served")
			_, name := dial(t, addr, f.root)
			assert.Equal(t, "good", name)
			assert.Equal(t, tt.reason, r.Status().LastRejection)
			rejected := f.reloads("certificate", "rejected") + f.reloads("ca_bundle", "rejected")
			assert.Equal(t, 1.0, rejected, "an identical repeated failure counts once")

			f.publishLeaf(t, "renewed", testpki.Opts{})
			r.Poll()
			assert.Equal(t, "renewed", r.Current().Certificate.Leaf.Subject.CommonName, "recovers on the next valid generation")
			assert.Empty(t, r.Status().LastRejection)
		})
	}
}

// Without ..data (plain files written one by one) a poll can see the new
// certificate with the old key: rejected, then recovered on the next poll.
func TestATornReadIsRejectedAndRecoveredOnTheNextPoll(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	cert1, key1 := f.root.Leaf(t, "one", testpki.Opts{})
	write := func(name string, data []byte) {
		require.NoError(t, writeFile(dir+"/"+name, data))
	}
	write("tls.crt", cert1)
	write("tls.key", key1)
	opts := f.options()
	opts.CertFile, opts.KeyFile, opts.CAFile = dir+"/tls.crt", dir+"/tls.key", ""
	r, err := tlsidentity.New(opts)
	require.NoError(t, err)

	cert2, key2 := f.root.Leaf(t, "two", testpki.Opts{})
	write("tls.crt", cert2)
	r.Poll()
	assert.Equal(t, tlsidentity.ReasonMismatch, r.Status().LastRejection)
	assert.Equal(t, "one", r.Current().Certificate.Leaf.Subject.CommonName)

	write("tls.key", key2)
	r.Poll()
	assert.Equal(t, "two", r.Current().Certificate.Leaf.Subject.CommonName)
}

func TestConsecutiveRotationsWithRejectionsBetweenAllRecover(t *testing.T) {
	f := newFixture(t)
	f.publishLeaf(t, "gen-0", testpki.Opts{})
	r, err := tlsidentity.New(f.options())
	require.NoError(t, err)
	for i := 1; i <= 5; i++ {
		f.proj.Publish(map[string][]byte{"tls.crt": []byte("broken"), "tls.key": []byte("broken"), "ca.crt": f.root.PEM})
		r.Poll()
		require.NotEmpty(t, r.Status().LastRejection)
		name := "gen-" + string(rune('0'+i))
		f.publishLeaf(t, name, testpki.Opts{NotAfter: time.Now().Add(time.Duration(24+i) * time.Hour)})
		r.Poll()
		require.Equal(t, name, r.Current().Certificate.Leaf.Subject.CommonName)

		// The expiry gauge follows each new notAfter.
		out, err := testutil.GatherAndCount(f.reg, "gridsync_identity_not_after_timestamp_seconds")
		require.NoError(t, err)
		assert.Equal(t, 2, out, "certificate and CA bundle")
		families, err := f.reg.Gather()
		require.NoError(t, err)
		for _, fam := range families {
			if fam.GetName() != "gridsync_identity_not_after_timestamp_seconds" {
				continue
			}
			for _, m := range fam.GetMetric() {
				if m.GetLabel()[0].GetValue() == "certificate" {
					assert.Equal(t, float64(r.Current().NotAfter.Unix()), m.GetGauge().GetValue())
				}
			}
		}
	}
	assert.Equal(t, 5.0, f.reloads("certificate", "rejected"))
	assert.Equal(t, 6.0, f.reloads("certificate", "success"))
}

func TestReadinessClosesAtExpiry(t *testing.T) {
	f := newFixture(t)
	f.publishLeaf(t, "short-lived", testpki.Opts{NotAfter: time.Now().Add(time.Hour)})
	r, err := tlsidentity.New(f.options())
	require.NoError(t, err)
	ok, _ := r.Ready()
	assert.True(t, ok)

	f.advance(2 * time.Hour)
	ok, why := r.Ready()
	assert.False(t, ok)
	assert.Contains(t, why, "expired")

	// A valid replacement reopens readiness.
	f.publishLeaf(t, "renewed", testpki.Opts{NotBefore: f.clock().Add(-time.Minute), NotAfter: f.clock().Add(time.Hour)})
	r.Poll()
	ok, _ = r.Ready()
	assert.True(t, ok)
}

func TestInvalidInitialMaterialFailsStartUp(t *testing.T) {
	f := newFixture(t)
	f.proj.Publish(map[string][]byte{"tls.crt": []byte("junk"), "tls.key": []byte("junk"), "ca.crt": f.root.PEM})
	_, err := tlsidentity.New(f.options())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate rejected (unparseable)")
	assert.True(t, strings.Contains(err.Error(), "tls.crt"))

	_, err = tlsidentity.New(tlsidentity.Options{CertFile: "/nonexistent/tls.crt", KeyFile: "/nonexistent/tls.key"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing")
}

// Resolving ..data once makes both files come from one generation, even
// when the visible names point elsewhere in the middle of a swap.
func TestBothFilesComeFromTheGenerationDataPointsAt(t *testing.T) {
	f := newFixture(t)
	f.publishLeaf(t, "current", testpki.Opts{})
	next, nextKey := f.root.Leaf(t, "next", testpki.Opts{})
	stray := f.proj.Path("..stray")
	require.NoError(t, os.Mkdir(stray, 0o755))
	require.NoError(t, os.WriteFile(stray+"/tls.crt", next, 0o600))
	require.NoError(t, os.WriteFile(stray+"/tls.key", nextKey, 0o600))
	// The visible certificate name already points at another generation.
	require.NoError(t, os.Remove(f.proj.Path("tls.crt")))
	require.NoError(t, os.Symlink("..stray/tls.crt", f.proj.Path("tls.crt")))

	r, err := tlsidentity.New(f.options())
	require.NoError(t, err)
	assert.Equal(t, "current", r.Current().Certificate.Leaf.Subject.CommonName)
	assert.NotEmpty(t, r.Current().Generation)
}
