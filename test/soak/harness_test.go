package soak

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testfs"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/test/testproc"
)

// Bounds the run holds the sidecar to, from a fault's end (its heal) to
// the newest published revision on disk, when no other fault overlaps.
// The API faults are bounded by the sidecar's backoff (1 s doubling to
// 30 s, plus up to half) and its watch idle timeout (10 s here).
var catchUpBound = map[string]time.Duration{
	"api_restart":       50 * time.Second,
	"etcd_compaction":   10 * time.Second,
	"proxy_reset":       50 * time.Second,
	"proxy_freeze":      50 * time.Second,
	"proxy_hold":        50 * time.Second,
	"proxy_delay":       50 * time.Second,
	"sidecar_kill":      15 * time.Second,
	"identity_rotation": 10 * time.Second,
	"configmap_gone":    10 * time.Second,
	"burst":             10 * time.Second,
	"invalid":           10 * time.Second,
	"volume_full":       10 * time.Second,
	"rbac_revoked":      50 * time.Second,
}

// staleBound is how long the newest revision may be missing from disk
// while the sidecar's /status says nothing is wrong: the watch idle
// timeout (a frozen path is only noticed by it) and a margin.
const staleBound = 20 * time.Second

type soak struct {
	t        *testing.T
	seed     uint64
	duration time.Duration
	// Each user of randomness draws from a stream of its own (see dice).
	schedule, producer, supervisor *dice

	ns, configMap string
	scope         envelope.Scope
	admin         kubernetes.Interface
	proxy         *controlplane.Proxy
	holding       *controlplane.HoldingProxy
	client        *http.Client // to the sidecar's health port
	kubeconfig    string
	dir, output   string
	health        string
	// The pod's TLS identity: the mounted Secret (projected the kubelet's
	// way) and the folder the sidecar publishes it into.
	ca            *testpki.Issuer
	projection    *testpki.Projection
	identityDir   string
	identities    map[string]int // leaf fingerprint → generation of valid identities
	identityGen   int
	identitySeen  int
	identityReads atomic.Int64

	cmMu      sync.Mutex // the producer and the faults that touch the ConfigMap
	mu        sync.Mutex
	published map[string]int // revision → generation
	gen       int            // the last generation built
	newest    int            // the newest generation the API accepted
	// acceptedAt: when the API accepted each generation not yet on disk.
	acceptedAt map[int]time.Time
	onDisk     int // the reader's last generation
	onDiskAt   time.Time
	fileRev    string    // the revision the reader last read
	fileRevAt  time.Time // since when the file holds it
	usage      map[int]*lifetime
	peak       usage
	longLived  int
	updates    int

	proc     *exec.Cmd
	procMu   sync.Mutex
	restarts int

	// The agent phase.
	viaAgent atomic.Bool
	agent    *agentRun
	grid     client.Client
	provider *v1alpha1.InferenceProvider
	modelSeq int
	// agentUpdates counts the agent's revisions, agentRestarts its
	// exits in its phase.
	agentUpdates, agentRestarts int
	unknown                     map[string]time.Time // revisions read before they were learnt

	reads        atomic.Int64
	invalidReads atomic.Int64
	epoch        atomic.Int64 // counts fault starts
	active       atomic.Int32 // faults in progress
	violations   []string
	firstEvents  string // the events up to the first violation
	events       *eventLog
	stats        map[string]*faultStats
}

type faultStats struct {
	count   int
	judged  int
	worstMS int64
}

func newSoak(t *testing.T, seed uint64, duration time.Duration) *soak {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &soak{
		t: t, seed: seed, duration: duration,
		schedule: newDice(seed, streamSchedule), producer: newDice(seed, streamProducer), supervisor: newDice(seed, streamSupervisor),
		ns:        fmt.Sprintf("soak-%d-%d", seed%100000, time.Now().UnixNano()%100000),
		published: map[string]int{}, acceptedAt: map[int]time.Time{}, unknown: map[string]time.Time{}, usage: map[int]*lifetime{}, events: &eventLog{}, stats: map[string]*faultStats{},
		admin: cp.AdminClient(),
	}
	// The network is cluster-scoped: a name of its own per run.
	s.scope = envelope.Scope{Network: s.ns, Gateway: "edge", Namespace: s.ns, LocalSite: "east"}
	s.configMap = envelope.ConfigMapName(s.scope.Network, s.scope.Gateway)
	cfg, err := cp.ConfigMapReaderConfig(ctx, s.ns, "gateway", s.configMap)
	require.NoError(t, err)
	// The sidecar's path to the API server: a TCP proxy (resets, frozen
	// paths) in front of an HTTPS proxy (held watches, slow responses).
	s.holding, err = cp.NewHoldingProxy()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.holding.Close() })
	s.proxy, err = controlplane.NewProxyTo(s.holding.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.proxy.Close() })
	s.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, controlplane.WriteKubeconfig(s.proxy.Config(cfg), s.kubeconfig))
	// A small memory-backed volume, as the chart's emptyDir: the full
	// volume fault fills it.
	s.dir = testfs.Mount(t, "size=2m")
	s.output = filepath.Join(s.dir, "routing-overlay.json")
	s.health = testproc.FreeAddr(t)
	s.client = &http.Client{Timeout: time.Second}
	s.ca = testpki.NewRoot(t, "soak-ca")
	s.projection = testpki.NewProjection(t)
	s.identityDir = filepath.Join(s.dir, "identity")
	s.identities = map[string]int{}
	return s
}

// dice is one stream of a run's randomness. The fault schedule, the
// producer, the sidecar's supervisor and every fault as it starts each
// draw from a stream of their own, seeded from the run's seed and the
// stream's number, so that a replay of a seed repeats the schedule
// exactly (which faults start at which offsets, for how long, with what
// data) however the goroutines interleave: one shared source would hand
// out its numbers in whatever order the goroutines happened to ask.
type dice struct {
	mu  sync.Mutex
	rng *rand.Rand
}

// The streams: the fixed ones, then a stream per fault picked, in the
// schedule's order, from streamFaults on.
const (
	streamSchedule = iota + 1
	streamProducer
	streamSupervisor
	streamFaults = 1000
)

func newDice(seed, stream uint64) *dice {
	return &dice{rng: rand.New(rand.NewPCG(seed, stream^0x9e3779b97f4a7c15))}
}

func (d *dice) intn(n int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rng.IntN(n)
}

// between returns a random duration in [lo, hi).
func (d *dice) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(d.intn(int(hi-lo)))
}

func (s *soak) violate(format string, args ...any) {
	msg := fmt.Sprintf("%s: ", time.Now().Format("15:04:05.000")) + fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.violations = append(s.violations, msg)
	first := len(s.violations) == 1
	s.mu.Unlock()
	s.events.add("VIOLATION " + msg)
	if first {
		// What led to it, kept before later events push it out, and said
		// at once: a long run can be looked at while it goes on.
		events := s.events.tail(400)
		s.mu.Lock()
		s.firstEvents = events
		s.mu.Unlock()
		fmt.Fprintf(os.Stderr, "first violation of seed %d: %s\nevents up to it:\n%s\n", s.seed, msg, events)
	}
}

// envelopeOf builds the next generation's envelope.
func (s *soak) envelopeOf() ([]byte, string, int) {
	s.mu.Lock()
	s.gen++
	g := s.gen
	s.mu.Unlock()
	overlay := envelope.Overlay{Network: s.scope.Network, LocalSite: s.scope.LocalSite}
	for i := range 1 + g%5 {
		c := envelope.Candidate{Kind: envelope.CandidateKindInferenceModel, Name: fmt.Sprintf("model-%d-%d", g, i),
			Site: "east-provider", Cluster: "sim-east", Fresh: true}
		c.StableID = envelope.StableID(c.Kind, c.Name, c.Site, c.Cluster)
		overlay.Candidates = append(overlay.Candidates, c)
	}
	doc, rev, err := envelope.Build(overlay, s.scope, envelope.Provenance{
		Producer: "soak", ProducerVersion: "soak", SourceName: s.scope.Network, SourceGeneration: int64(g), RenderedAt: time.Now(),
	})
	require.NoError(s.t, err)
	s.mu.Lock()
	s.published[rev] = g
	s.mu.Unlock()
	return doc, rev, g
}

// publish writes the next valid generation; the caller holds cmMu.
func (s *soak) publishLocked(ctx context.Context) {
	doc, rev, g := s.envelopeOf()
	if err := s.put(ctx, map[string]string{envelope.DataKeyEnvelope: string(doc)}); err != nil {
		s.events.add(fmt.Sprintf("publish gen %d failed: %v", g, err))
		return
	}
	s.mu.Lock()
	if g > s.newest {
		s.newest = g
	}
	s.acceptedAt[g] = time.Now()
	s.updates++
	s.mu.Unlock()
	s.events.add(fmt.Sprintf("published gen %d %s", g, rev[:12]))
}

// publish writes the next valid generation, or in the agent phase makes
// the agent publish one.
func (s *soak) publish(ctx context.Context) {
	s.cmMu.Lock()
	defer s.cmMu.Unlock()
	if s.viaAgent.Load() {
		s.agentBump(ctx)
		return
	}
	s.publishLocked(ctx)
}

// put writes the ConfigMap's data, creating it when it is absent.
func (s *soak) put(ctx context.Context, data map[string]string) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cms := s.admin.CoreV1().ConfigMaps(s.ns)
	// With the agent's labels: the agent takes the ConfigMap over in its
	// phase, as it would from a previous agent.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: s.configMap, Labels: map[string]string{
		envelope.LabelManagedBy: "gridsync-agent", envelope.LabelNetwork: s.scope.Network, envelope.LabelGateway: s.scope.Gateway,
	}}, Data: data}
	_, err := cms.Update(cctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(cctx, cm, metav1.CreateOptions{})
	}
	return err
}

// supervise keeps the sidecar binary running as the kubelet keeps a
// container: when it exits (killed by a fault, or refusing invalid
// identity material at start), it is started again after a short delay.
// It returns when stop is closed.
func (s *soak) supervise(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		cmd := exec.Command(framework.Bin(testbin.Sidecar), //nolint:noctx // killed by the faults and at the end
			"--kubeconfig", s.kubeconfig, "--namespace", s.ns, "--config-map", s.configMap, "--output", s.output,
			"--expected-network", s.scope.Network, "--expected-gateway", s.scope.Gateway, "--expected-local-site", s.scope.LocalSite,
			"--health-addr", s.health, "--watch-idle-timeout", "10s", "--max-bytes", "65536",
			"--identity-cert", s.projection.Path("tls.crt"), "--identity-key", s.projection.Path("tls.key"),
			"--identity-ca", s.projection.Path("ca.crt"), "--identity-dir", s.identityDir, "--identity-interval", "200ms")
		cmd.Stderr = &lineWriter{log: s.events, prefix: "sidecar "}
		if err := cmd.Start(); err != nil {
			s.violate("harness: start the sidecar: %v", err)
			return
		}
		s.procMu.Lock()
		s.proc = cmd
		s.procMu.Unlock()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-stop:
			_ = cmd.Process.Signal(syscall.SIGKILL)
			s.events.add(fmt.Sprintf("sidecar stopped: %v", <-exited))
			return
		case err := <-exited:
			s.events.add(fmt.Sprintf("sidecar exited: %v", err))
		}
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
		select {
		case <-stop:
			return
		case <-time.After(s.supervisor.between(100*time.Millisecond, 2*time.Second)):
		}
	}
}

func (s *soak) killSidecar() {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	if s.proc != nil && s.proc.Process != nil {
		_ = s.proc.Process.Signal(syscall.SIGKILL)
	}
}

// read is one gateway read of the folder: the file is absent before the
// first publication, and afterwards always a complete valid envelope of
// this scope, of a published revision, never older than the last read.
func (s *soak) read() {
	data, err := os.ReadFile(s.output)
	s.reads.Add(1)
	s.mu.Lock()
	seen := s.onDisk
	s.mu.Unlock()
	if errors.Is(err, os.ErrNotExist) {
		if seen > 0 {
			s.invalidReads.Add(1)
			s.violate("the overlay file disappeared after generation %d", seen)
		}
		return
	}
	if err != nil {
		s.violate("read: %v", err)
		return
	}
	res, err := envelope.Validate(data, envelope.Options{Expect: s.scope})
	if err != nil {
		s.invalidReads.Add(1)
		s.violate("invalid read (%d bytes): %v", len(data), err)
		return
	}
	s.mu.Lock()
	if res.Revision != s.fileRev {
		s.fileRev, s.fileRevAt = res.Revision, time.Now()
	}
	g, ok := s.published[res.Revision]
	if ok && g > s.onDisk {
		s.onDisk, s.onDiskAt = g, time.Now()
	}
	// The agent's revisions are learnt from a watch, which may come a
	// moment after the sidecar's.
	first, waited := s.unknown[res.Revision]
	if !ok && !waited {
		s.unknown[res.Revision] = time.Now()
	}
	s.mu.Unlock()
	switch {
	case !ok && waited && time.Since(first) > 5*time.Second:
		s.violate("the file holds revision %s, which was never published", res.Revision)
	case !ok:
	case g < seen:
		s.violate("the file went back from generation %d to %d", seen, g)
	}
}

// behind is how long the oldest accepted generation newer than the one
// on disk has waited; zero when the disk holds the newest.
func (s *soak) behindLocked(now time.Time) time.Duration {
	var oldest time.Time
	for g, at := range s.acceptedAt {
		if g <= s.onDisk {
			delete(s.acceptedAt, g)
			continue
		}
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	if oldest.IsZero() {
		return 0
	}
	return now.Sub(oldest)
}

// status is what the sidecar's /status says.
type status struct {
	State           string `json:"state"`
	Ready           bool   `json:"ready"`
	DegradedReason  string `json:"degraded_reason"`
	WrittenRevision string `json:"written_revision"`
}

// checkStatus holds the sidecar to saying so when the newest revision has
// been missing from disk for longer than staleBound.
func (s *soak) checkStatus(client *http.Client) {
	st, ok := s.getStatus(client)
	if !ok {
		return // killed or starting
	}
	s.mu.Lock()
	behind := s.behindLocked(time.Now())
	newest, onDisk, fileRev, fileSince := s.newest, s.onDisk, s.fileRev, s.fileRevAt
	s.mu.Unlock()
	if behind > staleBound && st.DegradedReason == "" && st.Ready {
		s.violate("the disk holds generation %d, %d was accepted, the oldest missing one %s ago, and /status says %s, ready, not degraded",
			onDisk, newest, behind.Round(time.Millisecond), st.State)
	}
	// /status names what the reader reads once the file has been still
	// for a while (a restarted sidecar that restored it names nothing).
	if st.WrittenRevision != "" && fileRev != "" && st.WrittenRevision != fileRev && time.Since(fileSince) > 2*time.Second {
		// The reader may be a moment behind a write that just happened:
		// read the file now, between two readings of /status that agree
		// (a write in between would change the second).
		now := s.currentRevision()
		if again, ok := s.getStatus(client); ok && again.WrittenRevision == st.WrittenRevision && now != "" && now != st.WrittenRevision {
			s.violate("/status says revision %s is written, the file holds %s (and has since %s)", st.WrittenRevision[:12], now[:12], time.Since(fileSince).Round(time.Millisecond))
		}
	}
	// /readyz and the ready gauge agree with /status (read around them, so
	// that a change in between is not taken for a disagreement).
	code := httpCode(client, "http://"+s.health+"/readyz")
	gauge, gaugeOK := metricValue(client, "http://"+s.health+"/metrics", "grid_overlay_sync_ready ")
	after, ok := s.getStatus(client)
	if !ok || after.Ready != st.Ready || code == 0 || !gaugeOK {
		return
	}
	if (code == http.StatusOK) != st.Ready || (gauge == 1) != st.Ready {
		s.violate("/status says ready=%v, /readyz answers %d, the ready gauge is %v", st.Ready, code, gauge)
	}
}

// currentRevision is the revision the file holds now; empty when it
// cannot be read or is not valid (the reader reports those).
func (s *soak) currentRevision() string {
	data, err := os.ReadFile(s.output)
	if err != nil {
		return ""
	}
	res, err := envelope.Validate(data, envelope.Options{Expect: s.scope})
	if err != nil {
		return ""
	}
	return res.Revision
}

func (s *soak) getStatus(client *http.Client) (status, bool) {
	resp, err := client.Get("http://" + s.health + "/status") //nolint:noctx // bounded by the client's timeout
	if err != nil {
		return status{}, false
	}
	defer func() { _ = resp.Body.Close() }()
	var st status
	return st, json.NewDecoder(resp.Body).Decode(&st) == nil
}

func httpCode(client *http.Client, url string) int {
	resp, err := client.Get(url) //nolint:noctx // bounded by the client's timeout
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// metricValue reads one sample of a Prometheus text page.
func metricValue(client *http.Client, url, prefix string) (float64, bool) {
	resp, err := client.Get(url) //nolint:noctx // bounded by the client's timeout
	if err != nil {
		return 0, false
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(body)) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// sampleProcess records the sidecar process's open files, threads and
// memory; a process that lived a minute must not have grown beyond the
// margins between its sample at 10 s and its last.
func (s *soak) sampleProcess() {
	s.procMu.Lock()
	cmd := s.proc
	s.procMu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	pid := cmd.Process.Pid
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return // gone
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return
	}
	u := usage{at: time.Now(), fds: len(fds)}
	if g, ok := metricValue(s.client, "http://"+s.health+"/metrics", "go_goroutines "); ok {
		u.goroutines = int(g)
	} else {
		return // between a kill and a restart
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, "Threads:"); ok {
			u.threads, _ = strconv.Atoi(strings.TrimSpace(rest))
		}
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			u.rssKiB = kib
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.usage[pid]
	if p == nil {
		p = &lifetime{started: u.at}
		s.usage[pid] = p
	}
	if p.baseline.at.IsZero() && u.at.Sub(p.started) >= 10*time.Second {
		p.baseline = u
	}
	p.last = u
	s.peak.fds, s.peak.threads, s.peak.rssKiB = max(s.peak.fds, u.fds), max(s.peak.threads, u.threads), max(s.peak.rssKiB, u.rssKiB)
	s.peak.goroutines = max(s.peak.goroutines, u.goroutines)
}

type usage struct {
	at                               time.Time
	fds, threads, goroutines, rssKiB int
}

type lifetime struct {
	started        time.Time
	baseline, last usage
}

// checkGrowth holds every sidecar process that lived a minute to the
// stated margins: 16 more open files, 8 more threads, 32 more goroutines,
// half again its memory plus 8 MiB.
func (s *soak) checkGrowth() {
	s.mu.Lock()
	var long []*lifetime
	for _, p := range s.usage {
		if !p.baseline.at.IsZero() && p.last.at.Sub(p.baseline.at) >= time.Minute {
			long = append(long, p)
		}
	}
	s.mu.Unlock()
	for _, p := range long {
		b, l := p.baseline, p.last
		if l.fds > b.fds+16 || l.threads > b.threads+8 || l.goroutines > b.goroutines+32 || l.rssKiB > b.rssKiB*3/2+8<<10 {
			s.violate("a sidecar process grew over %s: files %d → %d, threads %d → %d, goroutines %d → %d, RSS %d → %d KiB",
				l.at.Sub(b.at).Round(time.Second), b.fds, l.fds, b.threads, l.threads, b.goroutines, l.goroutines, b.rssKiB, l.rssKiB)
		}
	}
	s.mu.Lock()
	s.longLived = len(long)
	s.mu.Unlock()
}

// fault is one kind of trouble: start it, and return its heal.
type fault struct {
	name string
	run  func(ctx context.Context, d *dice) bool // injects, waits, heals; false when it does not apply now
}

func (s *soak) faults() []fault {
	return []fault{
		{"api_restart", func(ctx context.Context, d *dice) bool {
			if err := cp.StopAPIServer(); err != nil {
				s.violate("stop kube-apiserver: %v", err)
			}
			time.Sleep(d.between(500*time.Millisecond, 3*time.Second))
			if err := cp.StartAPIServer(ctx); err != nil {
				s.violate("start kube-apiserver: %v", err)
			}
			return true
		}},
		{"etcd_compaction", func(ctx context.Context, d *dice) bool {
			if _, err := cp.CompactEtcd(ctx); err != nil {
				s.events.add(fmt.Sprintf("compaction: %v", err))
			}
			return true
		}},
		{"proxy_reset", func(_ context.Context, d *dice) bool {
			s.proxy.Cut()
			time.Sleep(d.between(200*time.Millisecond, 5*time.Second))
			s.proxy.Restore()
			return true
		}},
		{"proxy_freeze", func(_ context.Context, d *dice) bool {
			s.proxy.Freeze()
			time.Sleep(d.between(500*time.Millisecond, 15*time.Second))
			s.proxy.Thaw()
			return true
		}},
		{"proxy_hold", func(_ context.Context, d *dice) bool {
			s.holding.HoldWatches()
			time.Sleep(d.between(500*time.Millisecond, 15*time.Second))
			s.holding.Release()
			return true
		}},
		{"proxy_delay", func(_ context.Context, d *dice) bool {
			s.holding.DelayAll(d.between(200*time.Millisecond, 5*time.Second))
			time.Sleep(d.between(time.Second, 10*time.Second))
			s.holding.DelayAll(0)
			return true
		}},
		{"sidecar_kill", func(_ context.Context, d *dice) bool {
			s.killSidecar() // the supervisor starts it again within 2 s
			time.Sleep(2 * time.Second)
			return true
		}},
		{"identity_rotation", func(_ context.Context, d *dice) bool {
			// Invalid generations, then a valid one: the reader must only
			// ever see matching pairs of published valid generations.
			for range 1 + d.intn(3) {
				s.projection.Publish(s.invalidIdentity(d))
				s.events.add("invalid identity generation projected")
				time.Sleep(d.between(100*time.Millisecond, time.Second))
			}
			s.rotateIdentity()
			return true
		}},
		{"configmap_gone", func(ctx context.Context, d *dice) bool {
			s.cmMu.Lock()
			defer s.cmMu.Unlock()
			if s.viaAgent.Load() {
				return false // the ConfigMap is the agent's in its phase
			}
			err := s.admin.CoreV1().ConfigMaps(s.ns).Delete(ctx, s.configMap, metav1.DeleteOptions{})
			s.events.add(fmt.Sprintf("ConfigMap deleted: %v", err))
			time.Sleep(d.between(200*time.Millisecond, 3*time.Second))
			s.publishLocked(ctx)
			return true
		}},
		{"burst", func(ctx context.Context, d *dice) bool {
			for range 10 + d.intn(40) {
				s.publish(ctx)
			}
			return true
		}},
		{"invalid", func(ctx context.Context, d *dice) bool {
			s.cmMu.Lock()
			defer s.cmMu.Unlock()
			if s.viaAgent.Load() {
				return false
			}
			data := s.invalidData(d)
			err := s.put(ctx, data)
			s.events.add(fmt.Sprintf("invalid update written: %v", err))
			time.Sleep(d.between(200*time.Millisecond, 2*time.Second))
			s.publishLocked(ctx)
			return true
		}},
		{"volume_full", func(_ context.Context, d *dice) bool {
			filler := filepath.Join(s.dir, "filler")
			f, err := os.Create(filler)
			if err != nil {
				s.violate("create filler: %v", err)
				return true
			}
			_, _ = io.Copy(f, io.LimitReader(zeroReader{}, 4<<20)) // until the volume is full
			_ = f.Close()
			time.Sleep(d.between(500*time.Millisecond, 4*time.Second))
			if err := os.Remove(filler); err != nil {
				s.violate("remove filler: %v", err)
			}
			return true
		}},
		{"rbac_revoked", func(ctx context.Context, d *dice) bool {
			// Retried: the API server may be restarting meanwhile.
			name := "gateway-overlay-reader"
			rbs := s.admin.RbacV1().RoleBindings(s.ns)
			if !s.retry(ctx, "delete the RoleBinding", func() error {
				err := rbs.Delete(ctx, name, metav1.DeleteOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return err
			}) {
				return true
			}
			s.events.add("RoleBinding deleted")
			time.Sleep(d.between(500*time.Millisecond, 5*time.Second))
			s.retry(ctx, "restore the RoleBinding", func() error {
				_, err := rbs.Create(ctx, &rbacv1.RoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
					Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "gateway", Namespace: s.ns}},
				}, metav1.CreateOptions{})
				if apierrors.IsAlreadyExists(err) {
					return nil
				}
				return err
			})
			return true
		}},
	}
}

// retry repeats an action of the harness for up to a minute (the API
// server may be down for another fault); failing is the harness's
// error, reported as a violation of the run.
func (s *soak) retry(ctx context.Context, what string, do func() error) bool {
	deadline := time.Now().Add(time.Minute)
	for {
		err := do()
		if err == nil {
			return true
		}
		if time.Now().After(deadline) {
			s.violate("harness: %s: %v", what, err)
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// invalidData is an update of one rejection reason, at random.
func (s *soak) invalidData(d *dice) map[string]string {
	doc, _, _ := s.envelopeOf()
	other := s.scope
	other.Gateway = "another-gateway"
	foreign, _, err := envelope.Build(envelope.Overlay{Network: other.Network, LocalSite: other.LocalSite}, other, envelope.Provenance{
		Producer: "soak", SourceName: other.Network, SourceGeneration: 1, RenderedAt: time.Now(),
	})
	require.NoError(s.t, err)
	switch d.intn(6) {
	case 0:
		return map[string]string{envelope.DataKeyEnvelope: "{\"schema_version\": "}
	case 1:
		return map[string]string{envelope.DataKeyEnvelope: string(foreign)}
	case 2: // a candidate changed, the digest not
		return map[string]string{envelope.DataKeyEnvelope: strings.Replace(string(doc), `"fresh": true`, `"fresh": false`, 1)}
	case 3:
		return map[string]string{envelope.DataKeyEnvelope: strings.Replace(string(doc), `"1.0.0"`, `"9.0.0"`, 1)}
	case 4: // over --max-bytes
		return map[string]string{envelope.DataKeyEnvelope: string(doc) + strings.Repeat(" ", 70<<10)}
	default:
		return map[string]string{"another-key": string(doc)}
	}
}

// rotateIdentity projects the next valid identity generation.
func (s *soak) rotateIdentity() {
	cert, key := s.ca.Leaf(s.t, "edge.soak.internal", testpki.Opts{})
	s.mu.Lock()
	s.identityGen++
	s.identities[leafFingerprint(cert)] = s.identityGen
	s.mu.Unlock()
	s.projection.Publish(map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": s.ca.PEM})
	s.events.add(fmt.Sprintf("identity generation %d projected", s.identityGen))
}

// invalidIdentity is a generation the sidecar must refuse: a key of
// another certificate, an expired certificate, or no certificate at all.
func (s *soak) invalidIdentity(d *dice) map[string][]byte {
	cert, _ := s.ca.Leaf(s.t, "edge.soak.internal", testpki.Opts{})
	_, otherKey := s.ca.Leaf(s.t, "edge.soak.internal", testpki.Opts{})
	switch d.intn(3) {
	case 0:
		return map[string][]byte{"tls.crt": cert, "tls.key": otherKey, "ca.crt": s.ca.PEM}
	case 1:
		expired, key := s.ca.Leaf(s.t, "edge.soak.internal", testpki.Opts{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
		return map[string][]byte{"tls.crt": expired, "tls.key": key, "ca.crt": s.ca.PEM}
	default:
		return map[string][]byte{"tls.crt": []byte("not a certificate"), "tls.key": otherKey, "ca.crt": s.ca.PEM}
	}
}

// readIdentity reads the identity as the gateway does: resolve ..data
// once, read both files from that generation. It must be a matching pair
// of a valid generation, never older than the last read.
func (s *soak) readIdentity() {
	gen, err := os.Readlink(filepath.Join(s.identityDir, "..data"))
	if err != nil {
		return // not published yet
	}
	cert, errCert := os.ReadFile(filepath.Join(s.identityDir, gen, "tls.crt"))
	key, errKey := os.ReadFile(filepath.Join(s.identityDir, gen, "tls.key"))
	if errors.Is(errCert, os.ErrNotExist) || errors.Is(errKey, os.ErrNotExist) {
		return // that generation was replaced between the resolution and the read
	}
	s.identityReads.Add(1)
	if errCert != nil || errKey != nil {
		s.violate("identity read: %v %v", errCert, errKey)
		return
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		s.violate("identity generation %s is not a matching pair: %v", gen, err)
		return
	}
	s.mu.Lock()
	g, ok := s.identities[leafFingerprint(cert)]
	last := s.identitySeen
	if ok && g > last {
		s.identitySeen = g
	}
	s.mu.Unlock()
	switch {
	case !ok:
		s.violate("the identity in %s is not a valid generation that was projected", gen)
	case g < last:
		s.violate("the identity went back from generation %d to %d", last, g)
	}
}

func leafFingerprint(certPEM []byte) string {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return ""
	}
	sum := sha256.Sum256(block.Bytes)
	return hex.EncodeToString(sum[:])
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// run drives the soak: the producer, the reader, the status checks and
// the faults, until the duration is over; then every fault is healed and
// the newest revision must arrive.
func (s *soak) run() summary {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	began := time.Now()
	s.publish(ctx)
	s.rotateIdentity()
	stopSidecar, supervised := make(chan struct{}), make(chan struct{})
	go s.supervise(stopSidecar, supervised)
	defer func() {
		close(stopSidecar)
		<-supervised
	}()

	var wg sync.WaitGroup
	stop := make(chan struct{})
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	loop := func(every func() time.Duration, do func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(every()):
					do()
				}
			}
		}()
	}
	loop(func() time.Duration { return 2 * time.Millisecond }, s.read)
	loop(func() time.Duration { return 5 * time.Millisecond }, s.readIdentity)
	loop(func() time.Duration { return s.producer.between(100*time.Millisecond, 800*time.Millisecond) }, func() { s.publish(ctx) })
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.learnRevisions(watchCtx)
	}()
	// The middle third of the run publishes through the agent.
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-stop:
			return
		case <-time.After(s.duration / 3):
		}
		s.agentPhase(ctx)
		select {
		case <-stop:
		case <-time.After(s.duration / 3):
		}
		s.endAgentPhase()
	}()
	loop(func() time.Duration { return 500 * time.Millisecond }, func() { s.checkStatus(s.client) })
	loop(func() time.Duration { return 2 * time.Second }, s.sampleProcess)

	// Faults: a new one every 0.5 to 4 s, each kind one at a time, any
	// kinds at once.
	kinds := s.faults()
	running := make([]atomic.Bool, len(kinds))
	var faulting sync.WaitGroup
	for pick := uint64(0); time.Since(began) < s.duration; pick++ {
		time.Sleep(s.schedule.between(500*time.Millisecond, 4*time.Second))
		i := s.schedule.intn(len(kinds))
		if !running[i].CompareAndSwap(false, true) {
			continue
		}
		f, d := kinds[i], newDice(s.seed, streamFaults+pick)
		faulting.Add(1)
		go func() {
			defer faulting.Done()
			defer running[i].Store(false)
			s.inject(ctx, f, d)
		}()
	}
	faulting.Wait()
	// Everything healed: the newest revision arrives.
	s.publish(ctx)
	s.mu.Lock()
	target := s.newest
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s.mu.Lock()
		done := s.onDisk >= target
		s.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			s.violate("after every fault healed, generation %d did not arrive within 60 s", target)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	stopWatch()
	wg.Wait()
	s.endAgentPhase()
	s.checkGrowth()
	return s.summarise(time.Since(began))
}

// inject runs one fault and, when no other fault started meanwhile,
// judges the catch-up after its heal against its bound.
func (s *soak) inject(ctx context.Context, f fault, d *dice) {
	s.epoch.Add(1)
	s.active.Add(1)
	s.events.add("fault " + f.name + " begins")
	if !f.run(ctx, d) {
		s.active.Add(-1)
		s.events.add("fault " + f.name + " does not apply now")
		return
	}
	healed := time.Now()
	s.events.add("fault " + f.name + " healed")
	s.mu.Lock()
	st := s.stats[f.name]
	if st == nil {
		st = &faultStats{}
		s.stats[f.name] = st
	}
	st.count++
	s.mu.Unlock()
	s.active.Add(-1)
	if s.active.Load() > 0 {
		return // another fault is still in progress: not this one's catch-up alone
	}
	epoch := s.epoch.Load()
	s.mu.Lock()
	before := s.newest
	s.mu.Unlock()
	s.publish(ctx)
	s.mu.Lock()
	target := s.newest
	s.mu.Unlock()
	if target == before {
		target = before + 1 // the agent's revision, learnt when it appears
	}
	bound := catchUpBound[f.name]
	for {
		s.mu.Lock()
		at, on := s.onDiskAt, s.onDisk
		s.mu.Unlock()
		if on >= target {
			if s.epoch.Load() != epoch {
				return // overlapped by a later fault
			}
			took := at.Sub(healed)
			s.mu.Lock()
			st.judged++
			st.worstMS = max(st.worstMS, took.Milliseconds())
			s.mu.Unlock()
			if took > bound {
				s.violate("after %s healed, generation %d took %s to arrive (bound %s)", f.name, target, took.Round(time.Millisecond), bound)
			}
			return
		}
		if s.epoch.Load() != epoch {
			return
		}
		if time.Since(healed) > bound+5*time.Second {
			s.violate("after %s healed, generation %d did not arrive within %s", f.name, target, bound)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type summary struct {
	seed                                   uint64
	duration                               time.Duration
	faults, updates, restarts, violations  int
	reads, invalidReads                    int64
	maxCatchUpMS                           int64
	stats                                  map[string]faultStats
	peak                                   usage
	longLived, agentUpdates, agentRestarts int
}

func (s *soak) summarise(d time.Duration) summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := summary{seed: s.seed, duration: d, updates: s.updates, restarts: s.restarts, violations: len(s.violations),
		reads: s.reads.Load(), invalidReads: s.invalidReads.Load(), stats: map[string]faultStats{}, peak: s.peak, longLived: s.longLived, agentUpdates: s.agentUpdates, agentRestarts: s.agentRestarts}
	for name, st := range s.stats {
		sum.faults += st.count
		sum.maxCatchUpMS = max(sum.maxCatchUpMS, st.worstMS)
		sum.stats[name] = *st
	}
	return sum
}

func (m summary) line() string {
	return fmt.Sprintf("soak seed=%d duration_s=%.0f faults=%d updates=%d reader_reads=%d invalid_reads=%d max_catch_up_ms=%d restarts=%d violations=%d agent_updates=%d agent_restarts=%d",
		m.seed, m.duration.Seconds(), m.faults, m.updates, m.reads, m.invalidReads, m.maxCatchUpMS, m.restarts, m.violations, m.agentUpdates, m.agentRestarts)
}

func (m summary) table() string {
	var names []string
	for n := range catchUpBound {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "  %-18s %6s %7s %14s %10s\n", "fault", "count", "judged", "worst_catch_up", "bound")
	for _, n := range names {
		st := m.stats[n]
		fmt.Fprintf(&b, "  %-18s %6d %7d %12dms %10s\n", n, st.count, st.judged, st.worstMS, catchUpBound[n])
	}
	fmt.Fprintf(&b, "  sidecar peak: %d open files, %d threads, %d goroutines, %d KiB RSS; %d processes lived a minute and were held to the growth margins\n",
		m.peak.fds, m.peak.threads, m.peak.goroutines, m.peak.rssKiB, m.longLived)
	return b.String()
}

// eventLog keeps the last events, for a violation's report.
type eventLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *eventLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, time.Now().Format("15:04:05.000")+" "+line)
	if len(l.lines) > 2000 {
		l.lines = slices.Clone(l.lines[1000:])
	}
}

func (l *eventLog) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines[max(0, len(l.lines)-n):], "\n")
}

// lineWriter turns a process's stderr into events.
type lineWriter struct {
	log    *eventLog
	prefix string
	buf    bytes.Buffer
	mu     sync.Mutex
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		w.log.add(w.prefix + strings.TrimSpace(line))
	}
}
