package controller_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/probe"
	rollout "github.com/gridsync/gridsync/delivery/fold"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/swimkeys"
	"github.com/gridsync/gridsync/signals"
	signalsapi "github.com/gridsync/gridsync/signals/httpapi"
	"github.com/gridsync/gridsync/test/testnet"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

func withSignals(store *signals.Store) agentOption {
	return func(o *controller.ManagerOptions) {
		o.Signals = store
		o.SignalsInterval = 200 * time.Millisecond
		if o.SiteName == "" {
			o.SiteName = "east"
		}
	}
}

func withLoopbackScrapes(maxBytes int64) agentOption {
	return func(o *controller.ManagerOptions) {
		o.ProbeDestinations = probe.Destinations{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
		o.SignalsScrapeMaxBytes = maxBytes
	}
}

// metricsServer plays a provider's metrics endpoint (Prometheus text).
type metricsServer struct {
	*httptest.Server
	mode atomic.Value // "ok", "down", "slow", "huge"
}

const providerMetrics = `# HELP vllm:num_requests_waiting Waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{name="pool-a"} 7
vllm:num_requests_waiting{name="pool-b"} 70
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{name="pool-a"} 0.42
# TYPE vllm:request_success_total counter
vllm:request_success_total{name="pool-a"} 1234
# TYPE unrelated_series gauge
unrelated_series 1
`

func startMetricsServer(t *testing.T) *metricsServer {
	m := &metricsServer{}
	m.mode.Store("ok")
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		switch m.mode.Load() {
		case "down":
			http.Error(w, "down", http.StatusServiceUnavailable)
		case "slow":
			time.Sleep(2 * time.Second)
			_, _ = w.Write([]byte(providerMetrics))
		case "huge":
			_, _ = w.Write([]byte(providerMetrics))
			_, _ = w.Write(bytes.Repeat([]byte("# padding\n"), 100000))
		default:
			_, _ = w.Write([]byte(providerMetrics))
		}
	}))
	t.Cleanup(m.Close)
	return m
}

func (e *env) metricsProvider(name, network string, m *metricsServer, stale int32) *v1alpha1.InferenceProvider {
	p := e.provider(name, network, "m1")
	p.Spec.MetricsConfig = &v1alpha1.MetricsConfig{
		MetricsEndpoint: m.URL, Timeout: "300ms", PoolName: "pool-a", StaleMetricsSeconds: &stale,
		SignalNames: v1alpha1.MetricSignalNames{QueueDepth: "vllm:num_requests_waiting", KVCacheUtilization: "vllm:gpu_cache_usage_perc",
			ErrorRate: "vllm:request_success_total"},
	}
	return p
}

// scraped waits for the provider's MetricsScraped condition to have
// status and reason, and returns its message.
func (e *env) scraped(p *v1alpha1.InferenceProvider, status metav1.ConditionStatus, reason string) string {
	e.t.Helper()
	var msg string
	e.eventually(p.Name+" MetricsScraped "+string(status)+"/"+reason, func() (bool, string) {
		var got v1alpha1.InferenceProvider
		if err := e.admin.Get(e.ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, controller.ConditionMetricsScraped)
		if c == nil {
			return false, "no condition"
		}
		msg = c.Message
		return c.Status == status && c.Reason == reason, string(c.Status) + "/" + c.Reason + ": " + c.Message
	})
	return msg
}

func rendered(store *signals.Store) string {
	var b bytes.Buffer
	_, _, _ = signals.Render(&b, store.Rows(nil), nil, time.Now())
	return b.String()
}

// A provider's declared load series are scraped into the site's signals,
// its pool's only, attributed to the site and the provider; a failed
// scrape leaves them to expire, and once stale they are absent, not 0.
func TestProviderMetricsAreScrapedIntoTheSiteSignals(t *testing.T) {
	e := newEnv(t)
	store := signals.NewStore(nil)
	m := startMetricsServer(t)
	network := e.network(e.gateway("edge", "east"))
	e.create(network)
	p := e.metricsProvider("llm", network.Name, m, 1)
	e.create(p)
	e.startAgent(withSignals(store), withLoopbackScrapes(64<<10))

	e.eventually("scraped", func() (bool, string) {
		out := rendered(store)
		return strings.Contains(out, `vllm:num_requests_waiting{grid_provider="`+p.Name+`",grid_site="east",name="pool-a"} 7 `), out
	})
	out := rendered(store)
	assert.Contains(t, out, `vllm:gpu_cache_usage_perc{grid_provider="`+p.Name+`",grid_site="east",name="pool-a"} 0.42 `)
	assert.NotContains(t, out, "pool-b", "another pool's samples are not this provider's")
	assert.NotContains(t, out, "unrelated_series", "only the declared signals")
	assert.NotContains(t, out, "request_success_total", "a counter is not a load signal")
	e.scraped(p, metav1.ConditionTrue, controller.ReasonScraped)
	e.eventually("health", func() (bool, string) {
		out := rendered(store)
		return strings.Contains(out, `grid_provider_phase{grid_provider="`+p.Name+`",grid_site="east",phase="Available"} 1 `) &&
			strings.Contains(out, `grid_provider_ready{grid_provider="`+p.Name+`",grid_site="east"} 1 `), out
	})

	m.mode.Store("down")
	e.eventually("stale samples absent", func() (bool, string) {
		out := rendered(store)
		return !strings.Contains(out, "vllm:"), out
	})
	assert.Contains(t, rendered(store), "grid_provider_phase", "the health stays")
	assert.Contains(t, e.scraped(p, metav1.ConditionFalse, controller.ReasonScrapeFailed), probe.OutcomeUnexpectedStatus)
	e.providerPhase(p, v1alpha1.ProviderAvailable, "Ready") // a failing scrape is not ill health

	// Without metricsConfig the condition goes.
	var got v1alpha1.InferenceProvider
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(p), &got))
	orig := got.DeepCopy()
	got.Spec.MetricsConfig = nil
	require.NoError(t, e.admin.Patch(e.ctx, &got, client.MergeFrom(orig)))
	e.eventually("no MetricsScraped condition", func() (bool, string) {
		require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(p), &got))
		c := meta.FindStatusCondition(got.Status.Conditions, controller.ConditionMetricsScraped)
		return c == nil, fmt.Sprint(c)
	})
}

// A provider whose metricsConfig names no series is not scraped (no
// request at all), and its status says why.
func TestMetricsWithoutSignalNamesAreNotScrapedAndSaySo(t *testing.T) {
	e := newEnv(t)
	store := signals.NewStore(nil)
	var requests atomic.Int64
	m := &metricsServer{Server: httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		_, _ = w.Write([]byte(providerMetrics))
	}))}
	t.Cleanup(m.Close)
	network := e.network(e.gateway("edge", "east"))
	e.create(network)
	unnamed := e.metricsProvider("unnamed", network.Name, m, 30)
	unnamed.Spec.MetricsConfig.SignalNames = v1alpha1.MetricSignalNames{}
	e.create(unnamed)
	e.startAgent(withSignals(store), withLoopbackScrapes(64<<10))

	e.scraped(unnamed, metav1.ConditionFalse, controller.ReasonNoSignalNames)
	time.Sleep(600 * time.Millisecond) // three more rounds
	assert.Zero(t, requests.Load(), "nothing is fetched")
	assert.NotContains(t, rendered(store), "vllm:")
}

// A slow, huge or forbidden scrape yields nothing: bounded in time, in
// size, and by the probes' destination rule.
func TestScrapesAreBounded(t *testing.T) {
	for _, c := range []struct {
		mode     string
		loopback bool
		outcome  string
	}{{"slow", true, probe.OutcomeTimeout}, {"huge", true, probe.OutcomeTooLarge}, {"ok", false, probe.OutcomeDestinationDenied}} {
		t.Run(fmt.Sprintf("%s-loopback=%v", c.mode, c.loopback), func(t *testing.T) {
			e := newEnv(t)
			store := signals.NewStore(nil)
			m := startMetricsServer(t)
			m.mode.Store(c.mode)
			network := e.network(e.gateway("edge", "east"))
			e.create(network)
			p := e.metricsProvider("llm", network.Name, m, 30)
			e.create(p)
			opts := []agentOption{withSignals(store)}
			if c.loopback {
				opts = append(opts, withLoopbackScrapes(64<<10))
			}
			e.startAgent(opts...)
			e.eventually("health row", func() (bool, string) {
				out := rendered(store)
				return strings.Contains(out, "grid_provider_phase"), out
			})
			time.Sleep(2500 * time.Millisecond) // several scrape rounds, and longer than the slow answer takes
			assert.NotContains(t, rendered(store), "vllm:")
			assert.Contains(t, e.scraped(p, metav1.ConditionFalse, controller.ReasonScrapeFailed), c.outcome)
		})
	}
}

// The listener's read endpoints answer by who is asking: the co-located
// gateway reads every row this site holds and every provider it may
// route to; a peer reads this site's own providers that the policies let
// it use, never a third site's rows; a denied site reads nothing.
func TestSignalsAndProvidersAreServedByWhoAsks(t *testing.T) {
	e := newEnv(t)
	store := signals.NewStore(nil)
	dir := &controller.Directory{}
	m := startMetricsServer(t)
	network := e.network(e.gateway("edge", "east"))
	network.Spec.NetworkPolicy = &v1alpha1.NetworkPolicy{Deny: []v1alpha1.SiteRef{{Site: "north"}}}
	e.create(network)
	open := e.metricsProvider("open", network.Name, m, 30)
	e.create(open)
	westOnly := e.provider("west-only", network.Name, "m2")
	westOnly.Spec.AccessPolicy = &v1alpha1.AccessPolicy{SiteSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.SiteLabel: "west"}}}
	e.create(westOnly)
	southOnly := e.provider("south-only", network.Name, "m3")
	southOnly.Spec.AccessPolicy = &v1alpha1.AccessPolicy{SiteSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.SiteLabel: "south"}}}
	e.create(southOnly)
	e.startAgent(withSignals(store), withLoopbackScrapes(64<<10), func(o *controller.ManagerOptions) { o.Directory = dir })
	api := &signalsapi.API{Site: "east", Store: store, Directory: dir}
	l := e.startReportListener(rollout.New(rollout.Options{Registerer: prometheus.NewRegistry()}), api)
	// A row a peer (south) reported, relayed to this site's gateway only.
	store.Set("south", "far", signals.PartPeer, []signals.Sample{{Metric: signals.MetricReady, Value: 1, At: time.Now()}}, time.Now().Add(time.Hour))

	caPEM, err := os.ReadFile(l.caFile)
	require.NoError(t, err)
	client := func(site string) *http.Client {
		if site == "" {
			return tlsClient(t, caPEM, l.gateway)
		}
		chain, key, err := l.ca.Issue(site, time.Now(), time.Hour)
		require.NoError(t, err)
		c, err := tls.X509KeyPair(chain, key)
		require.NoError(t, err)
		return tlsClient(t, caPEM, c)
	}
	get := func(c *http.Client, path string) (int, http.Header, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, l.url+path, http.NoBody)
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header, string(body)
	}
	gateway, west, north := client(""), client("west"), client("north")
	e.eventually("the gateway reads every row", func() (bool, string) {
		_, _, body := get(gateway, signalsapi.SignalsPath)
		return strings.Contains(body, `vllm:num_requests_waiting{grid_provider="`+open.Name+`",grid_site="east"`) &&
			strings.Contains(body, `grid_provider_ready{grid_provider="far",grid_site="south"} 1`) &&
			strings.Contains(body, `grid_provider_ready{grid_provider="`+westOnly.Name+`"`), body
	})
	_, header, body := get(gateway, signalsapi.SignalsPath)
	assert.Equal(t, signals.ContentType, header.Get("Content-Type"))
	assert.NotEmpty(t, header.Get("Age"))
	assert.NotEmpty(t, header.Get("Date"))
	parsed, err := signals.Parse([]byte(body), nil)
	require.NoError(t, err, "the answer is exposition a Prometheus parser reads")
	assert.NotEmpty(t, parsed)

	// A peer's answer is narrowed by the providers' access policies as
	// the network's reconciles published them: until the first one it is
	// not available.
	e.eventually("west reads the rows its policies admit", func() (bool, string) {
		status, _, body := get(west, signalsapi.SignalsPath)
		return status == http.StatusOK && strings.Contains(body, `grid_provider="`+westOnly.Name+`"`), body
	})
	_, _, body = get(west, signalsapi.SignalsPath)
	assert.Contains(t, body, `grid_provider="`+open.Name+`"`)
	assert.Contains(t, body, `grid_provider="`+westOnly.Name+`"`, "its access policy admits west")
	assert.NotContains(t, body, `grid_provider="`+southOnly.Name+`"`, "its access policy admits south only")
	assert.NotContains(t, body, `grid_site="south"`, "a peer never reads a third site's rows")

	_, _, body = get(west, signalsapi.SignalsPath+"?target="+open.Name+"&collect[]=vllm:gpu_cache_usage_perc")
	assert.Contains(t, body, "vllm:gpu_cache_usage_perc")
	assert.NotContains(t, body, "num_requests_waiting", "collect[] narrows")
	assert.NotContains(t, body, westOnly.Name, "target narrows")

	status, _, body := get(north, signalsapi.SignalsPath)
	assert.Equal(t, http.StatusOK, status)
	assert.Empty(t, strings.TrimSpace(body), "the network denies north")

	var listing struct {
		Site      string                     `json:"site"`
		Providers []controller.ProviderEntry `json:"providers"`
	}
	// The listing answers from what the network's reconciles published:
	// until the first one that saw the providers it says not ready, or
	// lists fewer.
	var names []string
	e.eventually("the listing holds the providers west may use", func() (bool, string) {
		status, _, body := get(west, signalsapi.ProvidersPath)
		if status != http.StatusOK {
			return false, body
		}
		require.NoError(t, json.Unmarshal([]byte(body), &listing))
		names = names[:0]
		for _, p := range listing.Providers {
			names = append(names, p.Name)
		}
		return len(names) == 2, body
	})
	for _, p := range listing.Providers {
		assert.True(t, p.Local)
	}
	assert.ElementsMatch(t, []string{open.Name, westOnly.Name}, names)
	_, _, body = get(north, signalsapi.ProvidersPath)
	require.NoError(t, json.Unmarshal([]byte(body), &listing))
	assert.Empty(t, listing.Providers)

	// The listing is what the network's last reconcile assessed: a
	// provider's change reaches it once the network is reconciled.
	update(e, southOnly, func(p *v1alpha1.InferenceProvider) {
		p.Spec.AccessPolicy.SiteSelector.MatchLabels[v1alpha1.SiteLabel] = "west"
	})
	e.eventually("the provider's new access policy reaches the listing", func() (bool, string) {
		_, _, body := get(west, signalsapi.ProvidersPath)
		return strings.Contains(body, `"name":"`+southOnly.Name+`"`), body
	})
}

// SPIFFE mode reads no pins, so a poll waits for encrypted gossip, which
// carries the host it dials (the reference's signals listener section):
// while SWIM runs in the clear (the network declares no swimKeySecretRef)
// the Active peer's signals port is never dialled and the poll says why;
// once both sites hold the key and gossip is encrypted, the peer is
// polled.
func TestSPIFFEModePollsPeersOnlyOverEncryptedGossip(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	network := e.spiffeNetwork("site-a")
	network.Spec.SignalTransport = &v1alpha1.SignalTransport{Mode: v1alpha1.SignalTransportPoll}

	// Site B's signals port counts who dials it.
	signalsPort, err := (&net.ListenConfig{}).Listen(e.ctx, "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = signalsPort.Close() })
	var dials atomic.Int32
	go func() {
		for {
			conn, err := signalsPort.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			_ = conn.Close()
		}
	}()
	// Each node binds one port for good: it starts again when a key
	// loads, where its peer still knows it.
	remote, stub := e.seedSite(network, "site-b", membership.Config{BindAddr: testnet.FreeTCPUDPAddr(t)})
	e.create(network)

	site := startSwimSite(t, "site-a", membership.Config{RequireKey: true, BindAddr: testnet.FreeTCPUDPAddr(t)})
	peerPort := func(o *controller.ManagerOptions) { o.SignalsPeerPort = signalsPort.Addr().(*net.TCPAddr).Port }
	e.startAgent(withMembership(site, seedNames{"site-b.grid.test": "127.0.0.1"}), withSiteTrust("site-a", time.Hour, time.Second),
		withSignals(signals.NewStore(nil)), peerPort)
	ca, _ := e.gridCA()
	remote.signsWith(t, network.Name, ca)
	_, chain := presentIssued(t, stub, ca, "site-b")
	require.NoError(t, remote.Publish(network.Name, chain, nil))

	// SPIFFE mode makes a GridSite written by hand Active on its SVID.
	gs := e.handWrittenSite(network, "site-b", stub.Addr)
	e.gridSite(client.ObjectKeyFromObject(gs), "Active", func(gs *v1alpha1.GridSite) bool { return gs.Status.Phase == sitetrust.PhaseActive })
	e.eventually("site B's SWIM address in the clear", func() (bool, string) {
		v := site.View(network.Name)
		return len(v.Sites) == 1 && v.Sites[0].SwimAddress != "" && !v.Encrypted, fmt.Sprintf("%+v", v.Sites)
	})
	e.eventually("the poll waiting for encrypted gossip", func() (bool, string) {
		return strings.Contains(e.logs.String(), `"outcome":"gossip_unencrypted"`), "no such log line"
	})
	time.Sleep(time.Second) // five signals rounds
	assert.Zero(t, dials.Load(), "the signals port of a site named by plaintext gossip is dialled")

	// The key, at both sites: gossip is encrypted, and B is polled.
	key := swimKey(t)
	e.create(e.secret("swim-key", map[string][]byte{"key": key}))
	remote.SetNetworkKeys(network.Name, &swimkeys.Set{Primary: key}, false)
	update(e, network, func(n *v1alpha1.GridNetwork) {
		n.Spec.TLS.SwimKeySecretRef = &v1alpha1.NamespacedKeyRef{Name: "swim-key", Namespace: e.credNS}
	})
	// Both nodes start again, encrypted; A's join of its seed may have
	// failed meanwhile (and waits its retry), so B joins A.
	e.eventually("both nodes encrypted", func() (bool, string) {
		return remote.Status().Encrypted && site.Status().Encrypted, fmt.Sprintf("%+v %+v", remote.Status(), site.Status())
	})
	remote.AnnounceSeeds(network.Name, []string{site.AdvertiseAddr()})
	e.eventually("site B's signals port polled over encrypted gossip", func() (bool, string) {
		return dials.Load() > 0 && site.View(network.Name).Encrypted, fmt.Sprintf("%d dials, %+v", dials.Load(), site.Status())
	})
}
