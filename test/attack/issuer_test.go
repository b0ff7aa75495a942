package attack

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/trust/enrol"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// issuerAgent is a signals agent that issues the site certificates of its
// network, wired as the chart's trust.enrollment.issuer wires it: the
// grid CA's key in a Secret it may read, the tokens (and the sites'
// records) in the Secret it may get and update by name.
type issuerAgent struct {
	*signalsAgent
	tokens *enrol.Tokens
}

func startIssuerAgent(t *testing.T) *issuerAgent {
	t.Helper()
	s := startSignalsAgent(t, framework.AgentOptions{})
	ctx := context.Background()
	require.NoError(t, cp.Grant(ctx, s.agentNS, controlplane.AgentServiceAccount, "gridsync-agent-enrollment", s.agentNS,
		rbac.EnrollmentTokenRules(enrol.DefaultTokenSecret)))
	require.NoError(t, cp.Grant(ctx, s.agentNS, controlplane.AgentServiceAccount, "gridsync-agent-grid-ca", s.agentNS,
		rbac.TrustSecretRules("grid-ca")))
	require.NoError(t, s.admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "grid-ca", Namespace: s.agentNS}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: s.pki.CACert, corev1.TLSPrivateKeyKey: s.pki.CAKey}}))
	a := &issuerAgent{signalsAgent: s, tokens: &enrol.Tokens{API: s.admin, Namespace: s.agentNS}}
	a.setTLS(func(tl *v1alpha1.GridTLS) {
		tl.CASecretRef = &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: s.agentNS}
	})
	// Issuing from the first honest enrolment on (the CA is read
	// uncached, but the agent's grant may take a moment to apply).
	require.Eventually(t, func() bool {
		_, _, err := a.enrol("warm-up")
		return err == nil
	}, 30*time.Second, 250*time.Millisecond, "the agent never issued a certificate")
	return a
}

// setTLS edits the network's spec.tls.
func (a *issuerAgent) setTLS(edit func(*v1alpha1.GridTLS)) {
	require.NoError(a.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n v1alpha1.GridNetwork
		if err := a.admin.Get(context.Background(), types.NamespacedName{Name: a.network}, &n); err != nil {
			return err
		}
		if n.Spec.TLS == nil {
			n.Spec.TLS = &v1alpha1.GridTLS{}
		}
		edit(n.Spec.TLS)
		return a.admin.Update(context.Background(), &n)
	}))
}

func (a *issuerAgent) issuer() enrol.Issuer {
	return enrol.Issuer{Address: a.signals, Site: listenerSite}
}

// token makes a token for site, as the issuer's operator does.
func (a *issuerAgent) token(site string) string {
	token, err := a.tokens.Add(context.Background(), a.network, site, time.Hour, time.Now())
	require.NoError(a.t, err)
	return token
}

// enrol enrols site with a token made for it now, as an enrolling agent
// does, and says how long the issuer took to answer.
func (a *issuerAgent) enrol(site string) (*tls.Certificate, time.Duration, error) {
	return a.request(enrol.Request{Network: a.network, Site: site, Token: a.token(site)}, nil)
}

// renew renews with current, as a renewing agent does.
func (a *issuerAgent) renew(site string, current *tls.Certificate) (*tls.Certificate, time.Duration, error) {
	return a.request(enrol.Request{Network: a.network, Site: site}, current)
}

func (a *issuerAgent) request(req enrol.Request, current *tls.Certificate) (*tls.Certificate, time.Duration, error) {
	key, csr, err := enrol.NewKey()
	require.NoError(a.t, err)
	req.CSR = string(csr)
	start := time.Now()
	chain, err := (&enrol.Client{Timeout: 5 * time.Second}).Request(context.Background(), a.issuer(), a.roots, req, current, key)
	took := time.Since(start)
	if err != nil {
		return nil, took, err
	}
	return pairOf(a.t, chain, key), took, nil
}

func pairOf(t *testing.T, chain []byte, key crypto.Signer) *tls.Certificate {
	certs, err := sitetrust.ParseCertificates(chain)
	require.NoError(t, err)
	pair := &tls.Certificate{PrivateKey: key, Leaf: certs[0]}
	for _, c := range certs {
		pair.Certificate = append(pair.Certificate, c.Raw)
	}
	return pair
}

// refusedFor is the issuer's reason for refusing, "" when err is no
// refusal.
func refusedFor(err error) string {
	var r *enrol.RefusedError
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

// honestSites are sites whose tokens were made before an attack, as an
// operator makes them ahead of an enrolment: a token is found by the
// issuer's next read of its token Secret, a quarter second at most
// after it was made.
type honestSites struct {
	prefix string
	tokens []string
}

func (a *issuerAgent) honestSites(prefix string, n int) honestSites {
	h := honestSites{prefix: prefix}
	for i := range n {
		h.tokens = append(h.tokens, a.token(fmt.Sprintf("%s-%d", prefix, i)))
	}
	time.Sleep(300 * time.Millisecond)
	return h
}

// honestFigures are what honestRounds saw.
type honestFigures struct {
	rounds, enrolled, renewed int
	slowest                   time.Duration
	errs                      []string
}

// allIssued is whether every honest enrolment and renewal was issued.
func (f honestFigures) allIssued(t *testing.T) bool {
	ok := f.rounds > 0 && f.enrolled == f.rounds && f.renewed == f.rounds
	if !ok {
		t.Logf("honest errors: %v", f.errs)
	}
	return ok
}

func (f honestFigures) figures() []figure {
	return []figure{{"honest_enrolments", fmt.Sprintf("%d/%d", f.enrolled, f.rounds)},
		{"honest_renewals", fmt.Sprintf("%d/%d", f.renewed, f.rounds)}, {"honest_max_ms", f.slowest.Milliseconds()}}
}

// honestRounds enrols one of the sites and renews it once, again and
// again until ctx is done (or the sites run out), and returns how many of
// each were issued and the slowest answer.
func (a *issuerAgent) honestRounds(ctx context.Context, sites honestSites) honestFigures {
	var f honestFigures
	for _, token := range sites.tokens {
		select {
		case <-ctx.Done():
			return f
		case <-time.After(200 * time.Millisecond):
		}
		site := fmt.Sprintf("%s-%d", sites.prefix, f.rounds)
		f.rounds++
		pair, took, err := a.request(enrol.Request{Network: a.network, Site: site, Token: token}, nil)
		f.slowest = max(f.slowest, took)
		if err != nil {
			f.errs = append(f.errs, "enrol: "+err.Error())
			continue
		}
		f.enrolled++
		_, took, err = a.renew(site, pair)
		f.slowest = max(f.slowest, took)
		if err != nil {
			f.errs = append(f.errs, "renew: "+err.Error())
			continue
		}
		f.renewed++
	}
	return f
}

// Connections without a certificate, from one address, each posting an
// enrolment that announces 16,000 bytes and sends one every 2 s,
// reconnecting when answered (the third round: they took the issuer's 4
// slots before their bodies came, and every honest enrolment and renewal
// was answered 429 for the connection's five minutes). The body is now
// read within a deadline before any slot is taken, one address has one
// enrolment in flight, and renewals have slots of their own: honest
// enrolments and renewals are answered within a second throughout.
func TestEnrolSlowBody(t *testing.T) {
	a := startIssuerAgent(t)
	sites := a.honestSites("slow-honest", size(150, 25))
	duration := time.Duration(size(60, 8)) * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var opened, timedOut, busy atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { a.slowEnrolments(ctx, net.IPv4(127, 0, 5, 1), &opened, &timedOut, &busy) })
	}
	// The slow bodies are in before the honest requests start.
	time.Sleep(500 * time.Millisecond)
	honest := a.honestRounds(ctx, sites)
	wg.Wait()
	held := honest.allIssued(t) && honest.slowest < time.Second && timedOut.Load() > 0
	report(t, "enrol_slow_body", held, append([]figure{
		{"slow_connections", opened.Load()}, {"slow_answered_408", timedOut.Load()}, {"slow_answered_429", busy.Load()},
		{"seconds", int(duration.Seconds())}}, honest.figures()...)...)
}

// slowEnrolments keeps one slow enrolment going from from until ctx is
// done: a new connection each time the issuer answers the last.
func (a *issuerAgent) slowEnrolments(ctx context.Context, from net.IP, opened, timedOut, busy *atomic.Int64) {
	d := &tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: from}, Timeout: 2 * time.Second},
		Config: &tls.Config{RootCAs: a.roots, ServerName: sitetrust.DNSName(listenerSite), MinVersion: tls.VersionTLS13}}
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", a.signals)
		if err != nil {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		opened.Add(1)
		_, _ = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 16000\r\n\r\n{", enrol.EnrollPath, a.signals)
		answer := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(c).ReadString('\n')
			answer <- line
		}()
		tick := time.NewTicker(2 * time.Second)
	trickle:
		for {
			select {
			case line := <-answer:
				switch {
				case strings.HasPrefix(line, "HTTP/1.1 408"):
					timedOut.Add(1)
				case strings.HasPrefix(line, "HTTP/1.1 429"):
					busy.Add(1)
				}
				break trickle
			case <-tick.C:
				_, _ = c.Write([]byte(" "))
			case <-ctx.Done():
				break trickle
			}
		}
		tick.Stop()
		_ = c.Close()
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// A renewal presented with a certificate the site has renewed since (a
// stolen old key, a decommissioned replica's copy): the third round got
// 200 certificates of 200 renewals in 171 ms. Only the newest certificate
// renews, its record kept in the issuer's Secret (so it holds across a
// restart of the issuer), and the newest renews at most
// enrol.MaxRenewals times an hour.
func TestRenewSuperseded(t *testing.T) {
	a := startIssuerAgent(t)
	first, _, err := a.enrol("superseded")
	require.NoError(t, err)
	newest, _, err := a.renew("superseded", first)
	require.NoError(t, err)

	n := size(200, 20)
	// As fast as one connection carries them (HTTP/2, kept alive, as the
	// third round sent them), from an address of their own.
	_, csr, err := enrol.NewKey()
	require.NoError(t, err)
	body, _ := json.Marshal(enrol.Request{Network: a.network, Site: "superseded", CSR: string(csr)})
	old := a.client(net.IPv4(127, 0, 7, 1), *first)
	var issued, refused, other atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := w; i < n; i += 2 {
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "https://"+a.signals+enrol.RenewPath, bytes.NewReader(body))
				resp, err := old.Do(req)
				if err != nil {
					other.Add(1)
					continue
				}
				var ref enrol.Refusal
				_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&ref)
				_ = resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusOK:
					issued.Add(1)
				case ref.Reason == enrol.RefusedSuperseded:
					refused.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	rec, err := a.tokens.Record(context.Background(), a.network, "superseded")
	require.NoError(t, err)
	recorded := rec != nil && rec.Serial == newest.Leaf.SerialNumber.Text(16)

	// The newest renews, up to the rate; then it is refused for the rate,
	// and the certificate it holds stays the newest.
	renewedByNewest, rateLimited := 0, 0
	current := newest
	for range enrol.MaxRenewals + 1 {
		next, _, err := a.renew("superseded", current)
		switch {
		case err == nil:
			renewedByNewest++
			current = next
		case refusedFor(err) == enrol.RefusedRenewalRate:
			rateLimited++
		}
	}
	held := issued.Load() == 0 && refused.Load() == int64(n) && recorded &&
		renewedByNewest == enrol.MaxRenewals-1 && rateLimited == 2
	report(t, "renew_superseded", held,
		figure{"renewals_sent", n}, figure{"issued_to_superseded", issued.Load()}, figure{"refused_superseded", refused.Load()}, figure{"other_answers", other.Load()},
		figure{"newest_recorded_in_secret", recorded}, figure{"renewed_by_newest", renewedByNewest}, figure{"refused_for_rate", rateLimited},
		figure{"max_renewals_per_hour", enrol.MaxRenewals})
}

// Anonymous enrolments (a token of the right shape that was never
// issued) carrying a CSR with a 44,800-bit RSA key, from six addresses
// (the third round: the signature was checked before the token, 97 ms of
// CPU a request, and honest enrolments and renewals were answered 429).
// The token is checked first and the key's size before any signature: an
// attack request costs the agent little CPU, and honest enrolments and
// renewals are issued meanwhile.
func TestCSRBigKey(t *testing.T) {
	a := startIssuerAgent(t)
	csr := testpki.OversizedRSACSR(t, 44800)
	sites := a.honestSites("big-honest", size(80, 15))
	duration := time.Duration(size(30, 5)) * time.Second
	cpuBefore := measure.MustCPU(t, a.agentPID())
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var sent, answered atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			c := a.client(net.IPv4(127, 0, 6, byte(w+1)))
			for ctx.Err() == nil {
				var raw [32]byte
				_, _ = rand.Read(raw[:])
				body, _ := json.Marshal(enrol.Request{Network: a.network, Site: fmt.Sprintf("big-%d", w),
					Token: "gst_" + base64.RawURLEncoding.EncodeToString(raw[:]), CSR: string(csr)})
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+a.signals+enrol.EnrollPath, bytes.NewReader(body))
				sent.Add(1)
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				answered.Add(1)
			}
		})
	}
	honest := a.honestRounds(ctx, sites)
	wg.Wait()
	cpu := measure.MustCPU(t, a.agentPID()) - cpuBefore
	// All of the agent's CPU, its reconciles and the honest requests
	// included, is charged to the attack requests.
	perRequest := float64(cpu.Microseconds()) / 1000 / float64(max(answered.Load(), 1))
	held := answered.Load() > 0 && perRequest < 10 && honest.allIssued(t)
	report(t, "csr_big_key", held, append([]figure{
		{"attack_requests", sent.Load()}, {"attack_answered", answered.Load()}, {"agent_cpu_ms", cpu.Milliseconds()},
		{"cpu_ms_per_attack_request", perRequest}}, honest.figures()...)...)
}

// A site the operator listed in refuseRenewal enrols with a token made
// before it was listed (the third round: a fresh certificate). It is
// refused, and its token is not spent: taken off the list, the site
// enrols with it.
func TestEnrolListedSite(t *testing.T) {
	a := startIssuerAgent(t)
	token, err := a.tokens.Add(context.Background(), a.network, "listed", time.Hour, time.Now())
	require.NoError(t, err)
	a.setTLS(func(tl *v1alpha1.GridTLS) {
		tl.SiteCertificate = &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateIssuer, RefuseRenewal: []string{"listed"}}
	})
	attempts := size(20, 5)
	issued, refusedListed := 0, 0
	for range attempts {
		_, _, err := a.request(enrol.Request{Network: a.network, Site: "listed", Token: token}, nil)
		switch {
		case err == nil:
			issued++
		case refusedFor(err) == enrol.RefusedRenewal:
			refusedListed++
		}
	}
	a.setTLS(func(tl *v1alpha1.GridTLS) { tl.SiteCertificate.RefuseRenewal = nil })
	_, _, err = a.request(enrol.Request{Network: a.network, Site: "listed", Token: token}, nil)
	unlisted := err == nil
	report(t, "enrol_listed_site", issued == 0 && refusedListed == attempts && unlisted,
		figure{"attempts", attempts}, figure{"issued", issued}, figure{"refused_listed", refusedListed},
		figure{"token_kept_enrols_once_unlisted", unlisted})
}

// A site is enrolled; a second valid token is made for its name (by
// mistake, or leaked), and an attacker enrols with it under a key of its
// own. Before the register, the issuer answered with a certificate for
// the name, recorded it as the site's newest, and the site's own next
// renewal was refused as superseded: the name changed hands. It is
// refused now (name_registered), before any signature, and the token is
// not spent; the site keeps renewing, and the register keeps naming its
// key, until the issuer's operator releases the name.
func TestNameTakeover(t *testing.T) {
	a := startIssuerAgent(t)
	site, _, err := a.enrol("taken")
	require.NoError(t, err)
	token := a.token("taken")
	time.Sleep(300 * time.Millisecond) // the issuer's next read of its tokens finds it
	attempts := size(20, 5)
	issued, refusedRegistered := 0, 0
	for range attempts {
		// A new key each time, as an attacker without the site's key has.
		_, _, err := a.request(enrol.Request{Network: a.network, Site: "taken", Token: token}, nil)
		switch {
		case err == nil:
			issued++
		case refusedFor(err) == enrol.RefusedNameRegistered:
			refusedRegistered++
		default:
			t.Logf("attempt: %v", err)
		}
	}
	var secret corev1.Secret
	require.NoError(t, a.admin.Get(context.Background(), types.NamespacedName{Namespace: a.agentNS, Name: enrol.DefaultTokenSecret}, &secret))
	sum := sha256.Sum256([]byte(token))
	_, kept := secret.Data[hex.EncodeToString(sum[:])] // tokens are stored under their SHA-256

	renewals, renewed := 2, 0
	current := site
	for range renewals {
		next, _, err := a.renew("taken", current)
		if err != nil {
			t.Logf("renewal: %v", err)
			continue
		}
		renewed++
		current = next
	}
	rec, err := a.tokens.Record(context.Background(), a.network, "taken")
	require.NoError(t, err)
	siteKey := rec != nil && rec.KeyFingerprint == sitetrust.Fingerprint(current.Leaf.RawSubjectPublicKeyInfo)
	held := issued == 0 && refusedRegistered == attempts && kept && renewed == renewals && siteKey
	report(t, "name_takeover", held,
		figure{"attempts", attempts}, figure{"issued", issued}, figure{"refused_name_registered", refusedRegistered},
		figure{"token_kept", kept}, figure{"site_renewed", fmt.Sprintf("%d/%d", renewed, renewals)}, figure{"register_names_site_key", siteKey})
}

// `gridsync-agent convert` given one huge scalar, and one mapping of very
// many keys (the third round: 1.9 GiB for 200 MiB, 720 MiB for a 15 MB
// mapping). The input is refused at its size, before it is decoded, and
// the command's memory stays near the size it read (its peak is polled
// every millisecond; the attack's growth took seconds).
func TestConvertSize(t *testing.T) {
	dir := t.TempDir()
	scalar := filepath.Join(dir, "scalar.yaml")
	f, err := os.Create(scalar)
	require.NoError(t, err)
	_, err = f.WriteString("apiVersion: grid.praxis-proxy.io/v1alpha1\nkind: GridSite\nmetadata: {name: x}\nspec:\n  note: ")
	require.NoError(t, err)
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	for range size(200, 40) {
		_, err = f.Write(chunk)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())

	mapping := filepath.Join(dir, "mapping.yaml")
	var b bytes.Buffer
	b.WriteString("apiVersion: grid.praxis-proxy.io/v1alpha1\nkind: GridSite\nmetadata: {name: x}\nspec:\n")
	for i := range size(1_000_000, 300_000) {
		fmt.Fprintf(&b, "  k%07d: v\n", i)
	}
	require.NoError(t, os.WriteFile(mapping, b.Bytes(), 0o600))

	type run struct {
		code    int
		stderr  string
		peakMiB float64
		took    time.Duration
	}
	convert := func(path string) run {
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(context.Background(), framework.Bin(testbin.Agent), "convert", "-f", path)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		peak, took, err := runPolled(cmd)
		r := run{stderr: stderr.String(), took: took, peakMiB: peak}
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			r.code = exit.ExitCode()
		} else {
			require.NoError(t, err)
		}
		require.Empty(t, stdout.String(), "nothing is printed")
		return r
	}
	s, m := convert(scalar), convert(mapping)
	held := s.code == 1 && strings.Contains(s.stderr, "over 32 MiB") &&
		m.code == 1 && strings.Contains(m.stderr, "over the API server's limit") &&
		s.peakMiB > 0 && s.peakMiB < 200 && m.peakMiB > 0 && m.peakMiB < 200 // a process never sampled has no peak
	if !held {
		t.Logf("scalar: %q; mapping: %q", s.stderr, m.stderr)
	}
	report(t, "convert_size", held,
		figure{"scalar_mib", size(200, 40)}, figure{"scalar_peak_mib", s.peakMiB}, figure{"scalar_ms", s.took.Milliseconds()},
		figure{"mapping_keys", size(1_000_000, 300_000)}, figure{"mapping_mib", float64(b.Len()) / (1 << 20)},
		figure{"mapping_peak_mib", m.peakMiB}, figure{"mapping_ms", m.took.Milliseconds()})
}
