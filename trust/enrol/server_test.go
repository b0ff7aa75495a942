package enrol

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

func TestOneRequestAtATimePerSource(t *testing.T) {
	var g addressGate
	release, ok := g.enter("192.0.2.1:4000")
	require.True(t, ok)
	_, ok = g.enter("192.0.2.1:4001")
	assert.False(t, ok, "a second request of one address waits its turn")
	_, ok = g.enter("[::ffff:192.0.2.1]:4002")
	assert.False(t, ok, "an IPv4-mapped address is the same address")
	other, ok := g.enter("192.0.2.2:4000")
	assert.True(t, ok, "another address is not held up")
	other()

	v6, ok := g.enter("[2001:db8:1:2::1]:443")
	require.True(t, ok)
	_, ok = g.enter("[2001:db8:1:2::ffff]:443")
	assert.False(t, ok, "one host holds a whole /64")
	next64, ok := g.enter("[2001:db8:1:3::1]:443")
	assert.True(t, ok, "another /64 is another source")
	next64()
	v6()

	release()
	release() // twice: the place is given back once
	again, ok := g.enter("192.0.2.1:4003")
	assert.True(t, ok, "the place is free once released")
	_, ok = g.enter("192.0.2.1:4004")
	assert.False(t, ok, "and taken again by one request only")
	again()
	_, ok = g.enter("not an address")
	assert.False(t, ok)
	assert.Empty(t, g.busy, "no source is kept once its requests are over")
}

func certWithSerial(serial int64, spki string) *x509.Certificate {
	return &x509.Certificate{SerialNumber: big.NewInt(serial), RawSubjectPublicKeyInfo: []byte(spki), NotAfter: time.Unix(1e9, 0)}
}

func fingerprintOf(c *x509.Certificate) string { return keyFingerprint(c) }

func TestOnlyTheNewestCertificateRenewsAtABoundedRate(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	first := certWithSerial(1, "key-1")
	fresh := spkiFingerprint([]byte("a fresh key"))
	var none *SiteRecord
	require.NoError(t, none.mayRenew(first, fresh, now), "a site without a record (issued before records were kept) renews")

	enrolled := none.issued("net", "a", first, nil, now)
	assert.Empty(t, enrolled.Renewals, "an enrolment is not a renewal")
	assert.Empty(t, enrolled.PreviousSerial, "an enrolment supersedes nothing that may retry")
	require.NoError(t, enrolled.mayRenew(first, fresh, now))

	second := certWithSerial(2, "key-2")
	r := enrolled.issued("net", "a", second, first, now)
	require.ErrorIs(t, r.mayRenew(first, fresh, now), ErrNotRetry, "the certificate renewed from asks only for the newest key")
	require.ErrorIs(t, r.mayRenew(certWithSerial(2, "another key"), fresh, now), ErrSuperseded, "the newest serial with another key is not the newest")
	require.NoError(t, r.mayRenew(second, fresh, now))
	require.ErrorIs(t, r.mayRenew(second, fingerprintOf(second), now), ErrSameKey, "a renewal brings a new key")

	cur := second
	for i := range MaxRenewals - 1 {
		next := certWithSerial(int64(3+i), fmt.Sprintf("key-%d", 3+i))
		r = r.issued("net", "a", next, cur, now.Add(time.Duration(i+1)*time.Minute))
		cur = next
	}
	require.Len(t, r.Renewals, MaxRenewals)
	at := now.Add(10 * time.Minute)
	require.ErrorIs(t, r.mayRenew(cur, fresh, at), ErrRenewalRate)
	require.ErrorIs(t, r.mayRenew(cur, fresh, now.Add(RenewalWindow-time.Second)), ErrRenewalRate, "the first renewal still counts")
	require.NoError(t, r.mayRenew(cur, fresh, now.Add(RenewalWindow)), "the first renewal left the window")

	// An enrolment (a fresh token) supersedes every earlier certificate,
	// none of which retries, and keeps the renewals counted.
	enrolledAgain := certWithSerial(99, "key-99")
	r = r.issued("net", "a", enrolledAgain, nil, at)
	require.ErrorIs(t, r.mayRenew(cur, fingerprintOf(enrolledAgain), at), ErrSuperseded)
	require.ErrorIs(t, r.mayRenew(enrolledAgain, fresh, at), ErrRenewalRate)
}

// A renewal whose answer was lost is retried from the certificate it
// presented, for the key it asked for then: the register answers it, and
// nothing else from that certificate or an older one.
func TestALostRenewalIsRetriedForTheSameKeyOnly(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	first := certWithSerial(1, "key-1")
	second := certWithSerial(2, "key-2")
	third := certWithSerial(3, "key-3")
	var none *SiteRecord
	r := none.issued("net", "a", first, nil, now)
	r = r.issued("net", "a", second, first, now.Add(-2*RenewalWindow)) // answered, and out of the window
	r = r.issued("net", "a", third, second, now)                       // its answer lost

	require.NoError(t, r.mayRenew(second, fingerprintOf(third), now), "the previous certificate retries for the newest key")
	require.ErrorIs(t, r.mayRenew(second, spkiFingerprint([]byte("a thief's key")), now), ErrNotRetry, "the previous certificate asks for no other key")
	require.ErrorIs(t, r.mayRenew(second, fingerprintOf(second), now), ErrNotRetry, "nor for its own")
	require.ErrorIs(t, r.mayRenew(first, fingerprintOf(third), now), ErrSuperseded, "an older certificate retries nothing")

	// The retry is issued for the same key with a serial of its own: the
	// newest changes, the previous stays, and it counts as a renewal.
	retried := certWithSerial(4, "key-3")
	next := r.issued("net", "a", retried, second, now)
	assert.Equal(t, retried.SerialNumber.Text(16), next.Serial)
	assert.Equal(t, r.KeyFingerprint, next.KeyFingerprint)
	assert.Equal(t, second.SerialNumber.Text(16), next.PreviousSerial)
	assert.Len(t, next.Renewals, 2, "the lost renewal and its retry")
	require.NoError(t, next.mayRenew(second, fingerprintOf(third), now), "a lost retry is retried again, within the rate")
	require.ErrorIs(t, next.mayRenew(third, spkiFingerprint([]byte("a fresh key")), now), ErrSuperseded, "the certificate first issued for the key is superseded by its retry")
	require.NoError(t, next.mayRenew(retried, spkiFingerprint([]byte("a fresh key")), now.Add(RenewalWindow)), "the retried certificate renews")

	// A renewal from the newest makes it the previous one.
	fifth := certWithSerial(5, "key-5")
	after := next.issued("net", "a", fifth, retried, now.Add(RenewalWindow))
	assert.Equal(t, retried.SerialNumber.Text(16), after.PreviousSerial)
	require.ErrorIs(t, after.mayRenew(second, fingerprintOf(fifth), now.Add(RenewalWindow)), ErrSuperseded)
}

// countingCA is the network's CA, counting the reads of it.
type countingCA struct {
	ca      *sitetrust.CA
	refused []string
	reads   atomic.Int64
}

func (c *countingCA) Authority(context.Context, string) (*sitetrust.CA, []string, error) {
	c.reads.Add(1)
	return c.ca, c.refused, nil
}

type orderFixture struct {
	t      *testing.T
	ca     *countingCA
	tokens *Tokens
	api    client.Client
	srv    *httptest.Server
	issuer *Server
	reads  atomic.Int64 // of the token Secret
}

func newOrderFixture(t *testing.T) *orderFixture {
	caPEM, caKey, err := sitetrust.NewCA(time.Now(), time.Hour)
	require.NoError(t, err)
	ca, err := sitetrust.ParseCA(caPEM, caKey)
	require.NoError(t, err)
	scheme := runtime.NewScheme()
	require.NoError(t, corev1.AddToScheme(scheme))
	f := &orderFixture{t: t, ca: &countingCA{ca: ca}}
	f.api = fake.NewClientBuilder().WithScheme(scheme).WithObjects(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: DefaultTokenSecret, Namespace: "issuer"}}).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			f.reads.Add(1)
			if err := ctx.Err(); err != nil {
				return err // as a real client's request ends with its context
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	f.tokens = &Tokens{API: f.api, Namespace: "issuer"}
	s, err := NewServer(f.ca, f.tokens, time.Hour, slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	f.issuer = s
	chain, key, err := ca.Issue("hub", time.Now(), time.Hour)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(chain, key)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	mux := http.NewServeMux()
	mux.Handle(EnrollPath, s)
	mux.Handle(RenewPath, s)
	f.srv = httptest.NewUnstartedServer(mux)
	f.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: roots, ClientAuth: tls.VerifyClientCertIfGiven}
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

// post sends an enrolment from a loopback source address and returns the
// refusal's reason ("" when issued).
func (f *orderFixture) post(from net.IP, req Request) (int, string) {
	body, _ := json.Marshal(req)
	roots := x509.NewCertPool()
	roots.AddCert(f.ca.ca.Cert)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: sitetrust.DNSName("hub")},
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}).DialContext}}
	hr, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, f.srv.URL+EnrollPath, bytes.NewReader(body))
	resp, err := c.Do(hr)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	var ref Refusal
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &ref)
	return resp.StatusCode, ref.Reason + ": " + ref.Message
}

func (f *orderFixture) tokenHeld(token string) bool {
	var s corev1.Secret
	require.NoError(f.t, f.api.Get(context.Background(), f.tokens.key(), &s))
	_, ok := s.Data[hashOf(token)]
	return ok
}

// The cheap checks come first: a CSR with an oversized key and no token
// is refused for its token without the CA read; with a valid token it is
// refused for its key, and the token is not spent; a listed site is
// refused before its token is spent.
func TestTheIssuerChecksCheapestFirstAndSpendsTheTokenLast(t *testing.T) {
	f := newOrderFixture(t)
	ctx := context.Background()
	big := testpki.OversizedRSACSR(t, 16384)
	lo := net.IPv4(127, 0, 0, 1)

	status, reason := f.post(lo, Request{Network: "net", Site: "a", CSR: string(big)})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, reason, RefusedToken+":")
	status, reason = f.post(lo, Request{Network: "net", Site: "a", Token: "gst_" + string(bytes.Repeat([]byte("x"), 43)), CSR: string(big)})
	assert.Equal(t, http.StatusForbidden, status, reason)
	assert.Contains(t, reason, RefusedToken+":")
	assert.Zero(t, f.ca.reads.Load(), "no token held: the CA is not read")

	token, err := f.tokens.Add(ctx, "net", "a", time.Hour, time.Now())
	require.NoError(t, err)
	status, reason = f.post(lo, Request{Network: "net", Site: "a", Token: token, CSR: string(big)})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, reason, "key refused: RSA key of 16384 bits")
	assert.True(t, f.tokenHeld(token), "a request refused for its CSR does not spend the token")

	f.ca.refused = []string{"a"}
	_, csr, err := NewKey()
	require.NoError(t, err)
	status, reason = f.post(lo, Request{Network: "net", Site: "a", Token: token, CSR: string(csr)})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, reason, RefusedRenewal+":")
	assert.Contains(t, reason, "neither renews nor enrols")
	assert.True(t, f.tokenHeld(token))

	f.ca.refused = nil
	status, reason = f.post(lo, Request{Network: "net", Site: "a", Token: token, CSR: string(csr)})
	require.Equal(t, http.StatusOK, status, reason)
	assert.False(t, f.tokenHeld(token), "spent once issued")
	rec, err := f.tokens.Record(ctx, "net", "a")
	require.NoError(t, err)
	require.NotNil(t, rec, "the enrolment is recorded as the site's newest certificate")
	assert.Empty(t, rec.Renewals)

	// The record sits beside the tokens, which it does not disturb.
	other, err := f.tokens.Add(ctx, "net", "b", time.Hour, time.Now())
	require.NoError(t, err)
	held, err := f.tokens.MayHold(ctx, other, time.Now().Add(time.Second))
	require.NoError(t, err)
	assert.True(t, held)
	rec, err = f.tokens.Record(ctx, "net", "a")
	require.NoError(t, err)
	assert.NotNil(t, rec, "adding a token keeps the records")
}

// A body that arrives slowly holds its address's place for the body
// deadline at most, and no slot: other addresses are answered meanwhile,
// the same address is told to wait its turn.
func TestASlowBodyHoldsNoSlot(t *testing.T) {
	f := newOrderFixture(t)
	slowFrom := net.IPv4(127, 0, 0, 2)
	conns := make([]*tls.Conn, enrolSlots+1)
	for i := range conns {
		d := &tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(i+1))}}, Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the test's own server
		c, err := d.DialContext(context.Background(), "tcp", f.srv.Listener.Addr().String())
		require.NoError(t, err)
		conns[i] = c.(*tls.Conn)
		defer c.Close()
		_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 16000\r\n\r\n{", EnrollPath)
		require.NoError(t, err)
	}
	// More slow bodies than slots, from as many addresses: an honest
	// enrolment is still answered, for its token.
	start := time.Now()
	status, reason := f.post(slowFrom, Request{Network: "net", Site: "a", Token: "gst_" + string(bytes.Repeat([]byte("y"), 43))})
	assert.Equal(t, http.StatusForbidden, status, reason)
	assert.Less(t, time.Since(start), bodyDeadline, "answered while the slow bodies are read")

	// The slow ones get 408 once the deadline passes.
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(3 * bodyDeadline))
		line, err := io.ReadAll(io.LimitReader(c, 12))
		require.NoError(t, err)
		assert.Equal(t, "HTTP/1.1 408", string(line))
	}
}

// request asks the fixture's issuer as an enrolling or renewing site does.
func (f *orderFixture) request(req Request, current *tls.Certificate) (*tls.Certificate, error) {
	key, _, err := NewKey()
	require.NoError(f.t, err)
	return f.requestFor(req, current, key)
}

// requestFor asks for key to be certified.
func (f *orderFixture) requestFor(req Request, current *tls.Certificate, key crypto.Signer) (*tls.Certificate, error) {
	csr, err := CertificateRequest(key)
	require.NoError(f.t, err)
	req.CSR = string(csr)
	roots := x509.NewCertPool()
	roots.AddCert(f.ca.ca.Cert)
	chain, err := (&Client{}).Request(context.Background(), Issuer{Address: f.srv.Listener.Addr().String(), Site: "hub"}, roots, req, current, key)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(chain, pemOfKey(f.t, key))
	require.NoError(f.t, err)
	return &pair, nil
}

func pemOfKey(t *testing.T, key any) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// A superseded certificate is refused, and once found superseded it is
// refused again without a read of the Secret; the newest renews.
func TestASupersededCertificateIsRefusedWithoutARead(t *testing.T) {
	f := newOrderFixture(t)
	token, err := f.tokens.Add(context.Background(), "net", "a", time.Hour, time.Now())
	require.NoError(t, err)
	first, err := f.request(Request{Network: "net", Site: "a", Token: token}, nil)
	require.NoError(t, err)
	newest, err := f.request(Request{Network: "net", Site: "a"}, first)
	require.NoError(t, err)

	var refused *RefusedError
	_, err = f.request(Request{Network: "net", Site: "a"}, first)
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, RefusedSuperseded, refused.Reason)
	before := f.reads.Load()
	for range 5 {
		_, err = f.request(Request{Network: "net", Site: "a"}, first)
		require.ErrorAs(t, err, &refused)
		assert.Equal(t, RefusedSuperseded, refused.Reason)
	}
	assert.Equal(t, before, f.reads.Load(), "a certificate known superseded costs no read")

	// The certificate renewed from still retries that renewal, for the
	// newest key: remembered as superseded, it is not refused that.
	retried, err := f.requestFor(Request{Network: "net", Site: "a"}, first, newest.PrivateKey.(crypto.Signer))
	require.NoError(t, err, "the retry of a renewal whose answer was lost")
	assert.NotEqual(t, newest.Leaf.SerialNumber, retried.Leaf.SerialNumber)
	assert.Equal(t, newest.Leaf.RawSubjectPublicKeyInfo, retried.Leaf.RawSubjectPublicKeyInfo)
	_, err = f.requestFor(Request{Network: "net", Site: "a"}, retried, retried.PrivateKey.(crypto.Signer))
	require.ErrorAs(t, err, &refused, "the newest does not renew its own key")
	assert.Equal(t, RefusedRequest, refused.Reason)

	_, err = f.request(Request{Network: "net", Site: "a"}, retried)
	require.NoError(t, err, "the newest renews")
}

// The set of superseded certificates stays bounded: full, it drops the
// expired ones, and every one when none has expired.
func TestTheSupersededSetIsBounded(t *testing.T) {
	now := time.Now()
	var s supersededSet
	for i := range maxSupersededHeld {
		c := certWithSerial(int64(i), "k")
		c.NotAfter = now.Add(-time.Minute)
		if i%2 == 0 {
			c.NotAfter = now.Add(time.Hour)
		}
		s.add("net", "a", c, "", now)
	}
	require.Len(t, s.held, maxSupersededHeld)
	extra := certWithSerial(1e6, "k")
	extra.NotAfter = now.Add(time.Hour)
	s.add("net", "a", extra, "", now)
	assert.Len(t, s.held, maxSupersededHeld/2+1, "the expired ones went")
	assert.ErrorIs(t, s.refusal("net", "a", extra, "any"), ErrSuperseded)
	assert.ErrorIs(t, s.refusal("net", "a", certWithSerial(0, "k"), "any"), ErrSuperseded)
	assert.NoError(t, s.refusal("net", "b", extra, "any"), "per site")

	previous := certWithSerial(3e6, "k")
	previous.NotAfter = now.Add(time.Hour)
	s.add("net", "a", previous, "newest", now)
	assert.ErrorIs(t, s.refusal("net", "a", previous, "other"), ErrNotRetry, "the previous certificate asks for no other key")
	assert.NoError(t, s.refusal("net", "a", previous, "newest"), "its retry goes on to the register")

	for i := range maxSupersededHeld {
		c := certWithSerial(int64(2e6+i), "k")
		c.NotAfter = now.Add(time.Hour)
		s.add("net", "a", c, "", now)
	}
	assert.LessOrEqual(t, len(s.held), maxSupersededHeld)
}

// With every enrolment slot taken, a guessed token is still refused for
// what it is (guesses never need a slot), and an enrolment with a real
// token is told to try again, its token kept; renewals have slots of
// their own.
func TestGuessesNeedNoSlot(t *testing.T) {
	f := newOrderFixture(t)
	token, err := f.tokens.Add(context.Background(), "net", "a", time.Hour, time.Now())
	require.NoError(t, err)
	first, err := f.request(Request{Network: "net", Site: "a", Token: token}, nil)
	require.NoError(t, err)
	for range enrolSlots {
		f.issuer.enrolments <- struct{}{}
	}
	lo := net.IPv4(127, 0, 0, 1)
	status, reason := f.post(lo, Request{Network: "net", Site: "b", Token: "gst_" + string(bytes.Repeat([]byte("z"), 43))})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, reason, RefusedToken+":")

	other, err := f.tokens.Add(context.Background(), "net", "b", time.Hour, time.Now())
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond) // the next read of the set finds it
	status, reason = f.post(lo, Request{Network: "net", Site: "b", Token: other})
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Contains(t, reason, RefusedBusy+":")
	assert.True(t, f.tokenHeld(other), "a busy answer spends no token")

	_, err = f.request(Request{Network: "net", Site: "a"}, first)
	require.NoError(t, err, "a renewal is answered while the enrolment slots are full")
}

// The one read of the token set that callers wait for answers them all:
// the caller that made it going away does not fail the others.
func TestTheTokenReadOutlivesItsCaller(t *testing.T) {
	f := newOrderFixture(t)
	token, err := f.tokens.Add(context.Background(), "net", "a", time.Hour, time.Now())
	require.NoError(t, err)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	now := time.Now().Add(time.Second) // past the set read by Add
	held, err := f.tokens.MayHold(gone, token, now)
	require.NoError(t, err, "the read is made for every caller, not only this one")
	assert.True(t, held)
	held, err = f.tokens.MayHold(context.Background(), token, now)
	require.NoError(t, err)
	assert.True(t, held)
}

// A certificate issued before a site's eviction does not renew once the
// eviction is lifted (the CA's issue floor is after it); one issued since
// does.
func TestACertificateFromBeforeAnEvictionDoesNotRenew(t *testing.T) {
	certPEM, keyPEM, err := sitetrust.NewCA(time.Now().Add(-time.Hour), 24*time.Hour)
	require.NoError(t, err)
	ca, err := sitetrust.ParseCA(certPEM, keyPEM)
	require.NoError(t, err)
	evicted := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	issue := func(at time.Time) *x509.Certificate {
		chain, _, err := ca.Issue("site-b", at, time.Hour)
		require.NoError(t, err)
		certs, err := sitetrust.ParseCertificates(chain)
		require.NoError(t, err)
		return certs[0]
	}
	before, after := issue(evicted.Add(-20*time.Minute)), issue(time.Now())
	now := time.Now()
	require.Nil(t, checkPresented(ca, "grid", "site-b", before, now), "no eviction: it renews")
	ca.IssueFloor = func(site string) time.Time {
		if site == "site-b" {
			return evicted.Add(time.Second)
		}
		return time.Time{}
	}
	ref := checkPresented(ca, "grid", "site-b", before, now)
	require.NotNil(t, ref)
	assert.Equal(t, RefusedRenewal, ref.reason)
	assert.Contains(t, ref.message, "dates from before site site-b's eviction")
	assert.Nil(t, checkPresented(ca, "grid", "site-b", after, now), "issued since the eviction")
}
