package enrol

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
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
)

// refusalOf is the issuer's refusal in err, failing the test when err is
// none.
func refusalOf(t *testing.T, err error) *RefusedError {
	t.Helper()
	var refused *RefusedError
	require.ErrorAs(t, err, &refused)
	return refused
}

// badlySignedCSR is a certificate request for a fresh key whose
// signature does not verify: a request that reaches the signature check
// is refused for it.
func badlySignedCSR(t *testing.T) string {
	key, _, err := NewKey()
	require.NoError(t, err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	require.NoError(t, err)
	der[len(der)-1] ^= 0xff
	_, err = x509.ParseCertificateRequest(der)
	require.NoError(t, err, "the request still parses")
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// A second token for an enrolled name enrols it under no other key: the
// enrolment is refused before the request's signature is checked, the
// token is not spent, and the registered site keeps renewing.
func TestARegisteredNameIsRefusedUnderAnotherKeyAndItsTokenKept(t *testing.T) {
	f := newOrderFixture(t)
	ctx := context.Background()
	first, err := f.tokens.Add(ctx, "net", "a", time.Hour, time.Now())
	require.NoError(t, err)
	enrolled, err := f.request(Request{Network: "net", Site: "a", Token: first}, nil)
	require.NoError(t, err)

	second, err := f.tokens.Add(ctx, "net", "a", time.Hour, time.Now())
	require.NoError(t, err)
	_, err = f.request(Request{Network: "net", Site: "a", Token: second}, nil)
	refused := refusalOf(t, err)
	assert.Equal(t, RefusedNameRegistered, refused.Reason)
	assert.Contains(t, refused.Message, "site a is registered in network net under another key")
	assert.Contains(t, refused.Message, "gridsync-agent release-name")
	assert.True(t, f.tokenHeld(second), "a refused enrolment spends no token")

	status, reason := f.post(net.IPv4(127, 0, 0, 1), Request{Network: "net", Site: "a", Token: second, CSR: badlySignedCSR(t)})
	assert.Equal(t, http.StatusConflict, status)
	assert.Contains(t, reason, RefusedNameRegistered+":", "refused before the request's signature is checked")
	assert.True(t, f.tokenHeld(second))

	rec, err := f.tokens.Record(ctx, "net", "a")
	require.NoError(t, err)
	assert.Equal(t, fingerprintOf(enrolled.Leaf), rec.KeyFingerprint, "the register still names the enrolled key")
	assert.Equal(t, TokenID(first), rec.TokenID)
	assert.WithinDuration(t, time.Now(), rec.EnrolledAt, time.Minute)
	_, err = f.request(Request{Network: "net", Site: "a"}, enrolled)
	require.NoError(t, err, "the registered site renews")
}

// The enrolment of a registered name for its registered key is the retry
// of an enrolment whose answer was lost: it is answered, with a new
// token, and the register keeps the first enrolment's time and token.
func TestTheRegisteredKeyEnrolsAgain(t *testing.T) {
	f := newOrderFixture(t)
	ctx := context.Background()
	key, _, err := NewKey()
	require.NoError(t, err)
	first, err := f.tokens.Add(ctx, "net", "a", time.Hour, time.Now())
	require.NoError(t, err)
	lost, err := f.requestFor(Request{Network: "net", Site: "a", Token: first}, nil, key)
	require.NoError(t, err)
	enrolledAt := mustRecord(t, f, "a").EnrolledAt

	second, err := f.tokens.Add(ctx, "net", "a", time.Hour, time.Now())
	require.NoError(t, err)
	retried, err := f.requestFor(Request{Network: "net", Site: "a", Token: second}, nil, key)
	require.NoError(t, err, "the same key enrols again")
	assert.NotEqual(t, lost.Leaf.SerialNumber, retried.Leaf.SerialNumber)
	assert.False(t, f.tokenHeld(second), "spent once issued")
	rec := mustRecord(t, f, "a")
	assert.Equal(t, serialOf(retried.Leaf), rec.Serial, "the retry's certificate is the newest")
	assert.Equal(t, TokenID(first), rec.TokenID, "enrolled with the first token")
	assert.Equal(t, enrolledAt, rec.EnrolledAt)
	_, err = f.request(Request{Network: "net", Site: "a"}, lost)
	assert.Equal(t, RefusedSuperseded, refusalOf(t, err).Reason, "the certificate whose answer was lost renews no more")
}

// A released name enrols under a new key with a token; no certificate
// issued before the release renews, then or later.
func TestAReleasedNameEnrolsUnderANewKey(t *testing.T) {
	f := newOrderFixture(t)
	ctx := context.Background()
	first, err := f.tokens.Add(ctx, "net", "a", time.Hour, time.Now())
	require.NoError(t, err)
	enrolled, err := f.request(Request{Network: "net", Site: "a", Token: first}, nil)
	require.NoError(t, err)
	newest, err := f.request(Request{Network: "net", Site: "a"}, enrolled)
	require.NoError(t, err)
	waiting, err := f.tokens.Add(ctx, "net", "a", time.Hour, time.Now())
	require.NoError(t, err)
	_, err = f.request(Request{Network: "net", Site: "a", Token: waiting}, nil)
	require.Equal(t, RefusedNameRegistered, refusalOf(t, err).Reason)

	released, err := f.tokens.Release(ctx, "net", "a", time.Now())
	require.NoError(t, err)
	assert.Equal(t, serialOf(newest.Leaf), released.Record.Serial)
	assert.Equal(t, fingerprintOf(newest.Leaf), released.Record.KeyFingerprint)
	assert.Equal(t, TokenID(first), released.Record.TokenID)
	require.Len(t, released.Pending, 1, "the token refused before the release can enrol the name now")
	assert.Equal(t, TokenID(waiting), released.Pending[0].ID)
	_, err = f.tokens.Release(ctx, "net", "a", time.Now())
	require.ErrorIs(t, err, ErrNotRegistered, "a released name is released once")
	_, err = f.tokens.Release(ctx, "net", "never", time.Now())
	require.ErrorIs(t, err, ErrNotRegistered)
	sites, _, err := f.tokens.Registered(ctx, "net", nil)
	require.NoError(t, err)
	assert.Empty(t, sites, "a released name is not listed")

	_, err = f.request(Request{Network: "net", Site: "a"}, newest)
	refused := refusalOf(t, err)
	assert.Equal(t, RefusedSuperseded, refused.Reason, "the released name's newest certificate does not take the name back")
	assert.Contains(t, refused.Message, "released")

	again, err := f.request(Request{Network: "net", Site: "a", Token: waiting}, nil)
	require.NoError(t, err, "the released name enrols under a new key")
	rec := mustRecord(t, f, "a")
	assert.Equal(t, fingerprintOf(again.Leaf), rec.KeyFingerprint)
	assert.Equal(t, TokenID(waiting), rec.TokenID)
	assert.True(t, rec.ReleasedAt.IsZero())
	for _, old := range []*tls.Certificate{enrolled, newest} {
		_, err = f.request(Request{Network: "net", Site: "a"}, old)
		assert.Equal(t, RefusedSuperseded, refusalOf(t, err).Reason)
	}
	_, err = f.request(Request{Network: "net", Site: "a"}, again)
	require.NoError(t, err, "the new key's certificate renews")
}

// A record written before the register kept the enrolment's time and
// token reads with them unknown: its certificate renews, and its key is
// the registered one.
func TestARecordWrittenBeforeTheRegisterStillRenews(t *testing.T) {
	f := newOrderFixture(t)
	ctx := context.Background()
	chain, keyPEM, err := f.ca.ca.Issue("a", time.Now(), time.Hour)
	require.NoError(t, err)
	held, err := tls.X509KeyPair(chain, keyPEM)
	require.NoError(t, err)
	old, err := json.Marshal(map[string]any{"network": "net", "site": "a", "serial": serialOf(held.Leaf),
		"keyFingerprint": fingerprintOf(held.Leaf), "notAfter": held.Leaf.NotAfter})
	require.NoError(t, err)
	require.NoError(t, f.tokens.update(ctx, func(s *corev1.Secret) error {
		s.Data[registerKey("net", "a")] = old
		return nil
	}, false))
	sites, unreadable, err := f.tokens.Registered(ctx, "net", nil)
	require.NoError(t, err)
	require.Len(t, sites, 1)
	assert.Zero(t, unreadable)
	assert.True(t, sites[0].EnrolledAt.IsZero(), "unknown")
	assert.Empty(t, sites[0].TokenID)

	token, err := f.tokens.Add(ctx, "net", "a", time.Hour, time.Now())
	require.NoError(t, err)
	_, err = f.request(Request{Network: "net", Site: "a", Token: token}, nil)
	assert.Equal(t, RefusedNameRegistered, refusalOf(t, err).Reason, "the old record registers its key")

	renewed, err := f.request(Request{Network: "net", Site: "a"}, &held)
	require.NoError(t, err, "the old record's certificate renews")
	rec := mustRecord(t, f, "a")
	assert.Equal(t, serialOf(renewed.Leaf), rec.Serial)
	assert.Equal(t, serialOf(held.Leaf), rec.PreviousSerial)
	assert.True(t, rec.EnrolledAt.IsZero(), "still unknown")
	assert.Empty(t, rec.TokenID)
}

// Two enrolments of one name under two keys, each with a token of its
// own, racing: the write that spends the second token finds the first's
// claim (the Secret's resource version serialises them), so one claims
// the name and the other is refused with its token kept.
func TestTwoEnrolmentsOfOneNameClaimItOnce(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, corev1.AddToScheme(scheme))
	ctx := context.Background()
	now := time.Now()
	var armed, raced bool
	var tokens, other *Tokens
	var first, second string
	var secondErr error
	api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: DefaultTokenSecret, Namespace: "issuer"}}).
		WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if armed && !raced {
				// The first claim has read the Secret and is about to
				// write: the second is written in between.
				raced = true
				secondErr = other.Claim(ctx, "net", "a", second, "key-b", now)
			}
			return c.Patch(ctx, obj, patch, opts...)
		}}).Build()
	tokens = &Tokens{API: api, Namespace: "issuer"}
	other = &Tokens{API: api, Namespace: "issuer"}
	var err error
	first, err = tokens.Add(ctx, "net", "a", time.Hour, now)
	require.NoError(t, err)
	second, err = tokens.Add(ctx, "net", "a", time.Hour, now)
	require.NoError(t, err)

	armed = true
	firstErr := tokens.Claim(ctx, "net", "a", first, "key-a", now)
	require.True(t, raced)
	require.NoError(t, secondErr, "the claim written first holds the name")
	require.ErrorIs(t, firstErr, ErrNameRegistered, "the claim written second finds it")
	var s corev1.Secret
	require.NoError(t, api.Get(ctx, tokens.key(), &s))
	assert.Contains(t, s.Data, hashOf(first), "the refused enrolment's token is kept")
	assert.NotContains(t, s.Data, hashOf(second))
	rec, err := tokens.Record(ctx, "net", "a")
	require.NoError(t, err)
	assert.Equal(t, "key-b", rec.KeyFingerprint)
	assert.Equal(t, TokenID(second), rec.TokenID)
	assert.Empty(t, rec.Serial, "claimed, its certificate not yet recorded")
}

// The register lists a network's names by site, marking those the caller
// says are evicted, and counts the records it cannot read.
func TestTheRegisterListsANetworksNames(t *testing.T) {
	f := newOrderFixture(t)
	ctx := context.Background()
	for _, n := range []struct{ network, site string }{{"net", "b"}, {"net", "a"}, {"other", "c"}} {
		token, err := f.tokens.Add(ctx, n.network, n.site, time.Hour, time.Now())
		require.NoError(t, err)
		_, err = f.request(Request{Network: n.network, Site: n.site, Token: token}, nil)
		require.NoError(t, err)
	}
	require.NoError(t, f.tokens.update(ctx, func(s *corev1.Secret) error {
		s.Data[registerKey("net", "broken")] = []byte("{")
		return nil
	}, false))
	sites, unreadable, err := f.tokens.Registered(ctx, "net", []string{"b", "c"})
	require.NoError(t, err)
	require.Len(t, sites, 2)
	assert.Equal(t, "a", sites[0].Site)
	assert.False(t, sites[0].Evicted)
	assert.Equal(t, "b", sites[1].Site)
	assert.True(t, sites[1].Evicted)
	assert.NotEmpty(t, sites[1].Serial)
	assert.Equal(t, 1, unreadable)

	released, err := f.tokens.Release(ctx, "net", "broken", time.Now())
	require.NoError(t, err, "a record that does not parse is released too")
	assert.Empty(t, released.Record.KeyFingerprint)
	_, unreadable, err = f.tokens.Registered(ctx, "net", nil)
	require.NoError(t, err)
	assert.Zero(t, unreadable)
}

func mustRecord(t *testing.T, f *orderFixture, site string) *SiteRecord {
	t.Helper()
	rec, err := f.tokens.Record(context.Background(), "net", site)
	require.NoError(t, err)
	require.NotNil(t, rec)
	return rec
}
