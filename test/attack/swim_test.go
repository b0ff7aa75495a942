package attack

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testnet"
	"github.com/gridsync/gridsync/test/testproc"
)

// chartMemoryLimitMiB is the agent chart's memory limit: what the agent
// must stay under through every flood.
const chartMemoryLimitMiB = 256

var seq atomic.Int32

// swimAgent is a gridsync-agent process of one site with SWIM on a
// loopback port, encrypted with key.
type swimAgent struct {
	*testproc.Proc
	t       *testing.T
	health  string
	swim    string
	key     []byte
	agentNS string
	resNS   string
	admin   client.Client
	// site and opts start it again (restart).
	site *framework.Site
	opts framework.AgentOptions
}

// startSwimAgent starts an agent with key (a new one when nil), joining
// seeds at start. Its peers live on loopback, which the agent's
// destination rule allows only when listed, as here.
func startSwimAgent(t *testing.T, key []byte, seeds ...string) *swimAgent {
	t.Helper()
	return startSwimAgentWith(t, key, seeds, true)
}

// startSwimAgentWith is startSwimAgent with loopback allowed or not; the
// agent has the fast timings of a site (a peer's departure in seconds).
func startSwimAgentWith(t *testing.T, key []byte, seeds []string, loopback bool) *swimAgent {
	t.Helper()
	site := framework.NewSite(t, cp, framework.SiteOptions{Prefix: "attack", Swim: true})
	site.Name = fmt.Sprintf("site-%d", site.ID)
	a := &swimAgent{t: t, swim: site.SwimAddr, key: key, agentNS: site.AgentNS, resNS: site.Namespace(), admin: site.Admin}
	if a.key == nil {
		a.key = make([]byte, 32)
		_, _ = rand.Read(a.key)
	}
	env := []string{"GRID_SWIM_ENCRYPT_KEY=" + hex.EncodeToString(a.key)}
	if len(seeds) > 0 {
		env = append(env, "GRID_SWIM_SEEDS="+strings.Join(seeds, ","))
	}
	a.site, a.opts = site, framework.AgentOptions{Timings: framework.Fast, Loopback: loopback, Env: env,
		Args: []string{"--gateway-address", testproc.FreeAddr(t)}}
	agent := site.StartAgent(t, a.opts)
	a.Proc, a.health = agent.Proc, agent.Health
	require.Eventually(t, func() bool { return a.status().Swim.Running }, 20*time.Second, 50*time.Millisecond, "SWIM never ran")
	return a
}

// restart kills the agent and starts it again on the same SWIM address,
// with what it kept in the API server and nothing else.
func (a *swimAgent) restart() {
	a.t.Helper()
	require.NoError(a.t, a.Cmd.Process.Kill())
	a.Wait(a.t, 10*time.Second)
	agent := a.site.StartAgent(a.t, a.opts)
	a.Proc, a.health = agent.Proc, agent.Health
	require.Eventually(a.t, func() bool { return a.status().Swim.Running }, 30*time.Second, 50*time.Millisecond, "SWIM never ran again")
}

type agentStatus struct {
	Swim struct {
		Running bool `json:"running"`
		Records int  `json:"records"`
	} `json:"swim"`
}

func (a *swimAgent) status() agentStatus {
	_, body := testproc.Get(a.t, "http://"+a.health+"/status")
	var st agentStatus
	_ = json.Unmarshal([]byte(body), &st)
	return st
}

// metric sums the agent's /metrics samples of series (any labels).
func (a *swimAgent) metric(series string) float64 {
	_, body := testproc.Get(a.t, "http://"+a.health+"/metrics")
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, series+" ") || strings.HasPrefix(line, series+"{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// metricLabel is the agent's sample of series with one label value.
func (a *swimAgent) metricLabel(series, label, value string) float64 {
	return a.metric(series + "{" + label + "=\"" + value + "\"}")
}

// outcomes are the agent's counts of what became of the records it
// received (grid_swim_records_received_total).
type outcomes struct{ stored, notNewer, refused, shed, overCap float64 }

func (a *swimAgent) recordOutcomes() outcomes {
	m := func(o string) float64 { return a.metricLabel("grid_swim_records_received_total", "outcome", o) }
	return outcomes{stored: m("stored"), notNewer: m("not_newer"), refused: m("refused"), shed: m("shed"), overCap: m("over_cap")}
}

func (a *swimAgent) rss() float64 {
	v, _ := measure.RSSMiB(a.Cmd.Process.Pid)
	return v
}

// rssPeak samples the agent's resident memory until stop is called.
func (a *swimAgent) rssPeak() (stop func() float64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			if v := uint64(a.rss() * 1024); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() float64 {
		close(done)
		<-finished
		return float64(peak.Load()) / 1024
	}
}

// Streams to the SWIM port without the key, each claiming an encrypted
// frame just under memberlist's 20 MiB limit and sending random bytes
// (the first round: 48 such streams took the agent from 36 to 2,211 MiB).
func TestSwimPreAuthStreams(t *testing.T) {
	a := startSwimAgent(t, nil)
	before := footprintOf(t, a.Cmd.Process.Pid, "http://"+a.health+"/metrics")
	streams := 48
	sendMiB := size(20, 4)
	stop := a.rssPeak()
	chunk := make([]byte, 256<<10)
	_, _ = rand.Read(chunk)
	var wg sync.WaitGroup
	var sent atomic.Int64
	deadline := time.Now().Add(30 * time.Second)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i%8))}}
			c, err := d.DialContext(context.Background(), "tcp", a.swim)
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.SetDeadline(deadline)
			hdr := []byte{10, 0, 0, 0, 0} // memberlist's encrypted-message byte and a length
			binary.BigEndian.PutUint32(hdr[1:], 20<<20-1)
			if _, err := c.Write(hdr); err != nil {
				return
			}
			for left := sendMiB << 20; left > 0; left -= len(chunk) {
				n, err := c.Write(chunk[:min(left, len(chunk))])
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
		}()
	}
	// The agent's own work goes on meanwhile: a new gateway's overlay.
	served := a.servesDuringFlood()
	wg.Wait()
	peak := stop()
	time.Sleep(500 * time.Millisecond)
	after := a.rss()
	code, _ := testproc.Get(t, "http://"+a.health+"/readyz")
	fp, settled := settles(t, a.Cmd.Process.Pid, "http://"+a.health+"/metrics", before)
	report(t, "swim_preauth_streams", peak < chartMemoryLimitMiB && code == 200 && a.Running() && settled && served >= 0,
		figure{"overlay_during_flood_ms", served},
		figure{"streams", streams}, figure{"sent_mib", sent.Load() >> 20}, figure{"agent_rss_peak_mib", peak},
		figure{"agent_rss_after_mib", after}, figure{"limit_mib", chartMemoryLimitMiB},
		figure{"goroutines", fmt.Sprintf("%d->%d", before.goroutines, fp.goroutines)}, figure{"fds", fmt.Sprintf("%d->%d", before.fds, fp.fds)})
}

// A captured join request replayed without the key (the first round: one
// 419-byte request resent 500 times brought back 223 MB, 1,065 times what
// was sent).
func TestSwimJoinReplay(t *testing.T) {
	a := startSwimAgent(t, nil)
	proxy := testnet.NewRecordingProxy(t, a.swim)
	// Another site joins through a recording proxy: its join is what an
	// eavesdropper captures.
	startSwimAgent(t, a.key, proxy.Addr())
	var join []byte
	require.Eventually(t, func() bool {
		var ok bool
		join, ok = proxy.First()
		return ok
	}, 20*time.Second, 20*time.Millisecond, "no join captured")
	replays := size(500, 50)
	var sent, back int64
	start := time.Now()
	for range replays {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", a.swim)
		if err != nil {
			continue
		}
		_, _ = c.Write(join)
		sent += int64(len(join))
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, _ := io.Copy(io.Discard, c)
		back += n
		c.Close()
	}
	amplification := float64(back) / float64(max(sent, 1))
	report(t, "swim_join_replay", amplification <= 1,
		figure{"replays", replays}, figure{"bytes_sent", sent}, figure{"bytes_back", back},
		figure{"amplification", amplification}, figure{"took_ms", time.Since(start).Milliseconds()})
}

// One key holder sends records for invented sites (the first round: six
// messages of 100,000 records, 600,004 records held, heap 764 to 863 MiB).
// They name networks this site takes no part in, so they are now refused
// at the door (refused) rather than by the caps (dropped), which the
// membership tests hold for the networks a site does take part in.
func TestSwimRecordFlood(t *testing.T) {
	a := startSwimAgent(t, nil)
	holder := testnet.KeyHolder(t, a.key)
	host, port, err := net.SplitHostPort(a.swim)
	require.NoError(t, err)
	p, _ := strconv.Atoi(port)
	to := &memberlist.Node{Name: "agent", Addr: net.ParseIP(host), Port: uint16(p)}
	// First the first round's messages, a hundred thousand records each
	// (refused whole), then messages under the per-message limit that
	// would grow the store past its caps.
	whole, wholeSize := size(6, 1), 100000
	messages, perMessage := size(6, 3), 10000
	send := func(m, n int) {
		var b bytes.Buffer
		b.WriteString("\x04{\"r\":[") // the state layer's direct records
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"n":"n%d","s":"inv-%d","k":"providers","v":1,"p":[{"name":"gpt-evil","models":["m"],"phase":"Available"}]}`, m*100+i%100, i)
		}
		b.WriteString("]}")
		_ = holder.SendReliable(to, b.Bytes())
	}
	before := footprintOf(t, a.Cmd.Process.Pid, "http://"+a.health+"/metrics")
	stop := a.rssPeak()
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		for m := range whole {
			send(m, wholeSize)
		}
		for m := range messages {
			send(100+m, perMessage)
		}
	}()
	served := a.servesDuringFlood()
	<-flooded
	time.Sleep(2 * time.Second)
	peak := stop()
	records := a.status().Swim.Records
	dropped := a.metric("grid_swim_messages_dropped_total")
	refused := a.metric("grid_swim_records_rejected_total")
	fp, settled := settles(t, a.Cmd.Process.Pid, "http://"+a.health+"/metrics", before)
	const recordCap = 16384
	report(t, "swim_record_flood", peak < chartMemoryLimitMiB && records <= recordCap && a.Running() && settled && served >= 0,
		figure{"overlay_during_flood_ms", served},
		figure{"goroutines", fmt.Sprintf("%d->%d", before.goroutines, fp.goroutines)}, figure{"fds", fmt.Sprintf("%d->%d", before.fds, fp.fds)},
		figure{"messages", whole + messages}, figure{"records_sent", whole*wholeSize + messages*perMessage}, figure{"records_held", records},
		figure{"dropped", int(dropped)}, figure{"refused", int(refused)}, figure{"agent_rss_peak_mib", peak}, figure{"limit_mib", chartMemoryLimitMiB})
}
