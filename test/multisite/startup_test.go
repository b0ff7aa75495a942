package multisite

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testnet"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/test/testproc"
)

// outage is how long site A's API server stays unreachable after its
// agent starts: several rounds of the informers' retries, and longer than
// the agent's report that its caches wait.
const outage = 12 * time.Second

// The reference's startup hold when the startup list fails: site A's
// agent starts while its API server is unreachable. It keeps running and
// retries the list in the background, and SWIM stays held meanwhile:
// nothing reaches the seed it was given, and its SWIM port takes nothing.
// Once the API server answers, A lists its network, loads the key and
// joins B, encrypted; the seed then hears from it, so its silence before
// was the hold's.
func TestSwimHoldOutlastsAnAPIServerUnreachableAtStart(t *testing.T) {
	key := newKey(t)
	root := testpki.NewRoot(t, "grid-ca")
	var pair []*site
	for i, name := range []string{"site-a", "site-b"} {
		s := newSite(t, clusters[i], name)
		cert, certKey := root.Leaf(t, name, testpki.Opts{})
		s.secret("swim-key", map[string][]byte{"key": key})
		s.secret("site-cert", map[string][]byte{"tls.crt": cert, "tls.key": certKey})
		pair = append(pair, s)
	}
	a, b := pair[0], pair[1]
	b.network("held")
	a.network("held", b.SwimAddr)
	b.start(nil)

	seed := listenSeed(t)
	proxy, err := a.CP.NewProxy()
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	proxy.Cut()
	a.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig-through-proxy")
	require.NoError(t, controlplane.WriteKubeconfig(proxy.Config(a.Config), a.Kubeconfig))
	health := testproc.FreeAddr(t)
	agentA := testproc.Start(t, framework.Bin(testbin.Agent), nil, a.AgentArgs(health, framework.AgentOptions{
		Timings: framework.Fast, Loopback: true, Args: []string{"--gateway-address", a.gateway, "--swim-seeds", seed.addr}})...)
	testproc.WaitOK(t, "http://"+health+"/livez")
	held := &agent{Agent: &framework.Agent{Proc: agentA, Health: health}, site: a}

	deadline := time.Now().Add(outage)
	for time.Now().Before(deadline) {
		require.True(t, agentA.Running(), "the agent exited while its API server was unreachable:\n%s", agentA.Log())
		code, _ := testproc.Get(t, "http://"+health+"/readyz")
		require.NotEqual(t, 200, code, "ready without its caches")
		require.False(t, held.status().Swim.Running, "SWIM ran before any network was listed")
		requireNotListening(t, a.SwimAddr)
		require.Zero(t, seed.heard.Load(), "the seed heard from a held site")
		time.Sleep(500 * time.Millisecond)
	}
	// Said every 10 s, after one bounded list that says why (up to 3 s
	// against an API server that does not answer).
	require.Eventually(t, func() bool { return strings.Contains(agentA.Log(), `"msg":"cache_sync_waiting"`) },
		15*time.Second, 100*time.Millisecond, "the agent says why it is not ready:\n%s", agentA.Log())
	require.True(t, agentA.Running())
	require.False(t, held.status().Swim.Running, "SWIM ran before any network was listed")

	proxy.Restore()
	// The informers' next list may come up to 30 s later (client-go's
	// backoff, doubled from 800 ms with jitter, and capped there).
	require.Eventually(t, func() bool { code, _ := testproc.Get(t, "http://"+health+"/readyz"); return code == 200 },
		60*time.Second, 100*time.Millisecond, "ready once its API server answers:\n%s", agentA.Log())
	b.networkStatus("held", 30*time.Second, counts(v1alpha1.NetworkActive, 1, 0))
	a.networkStatus("held", 30*time.Second, counts(v1alpha1.NetworkActive, 1, 0))
	st := held.status()
	assert.True(t, st.Swim.Running)
	assert.True(t, st.Swim.Encrypted, "released by the network's key, not to the clear")
	assert.Equal(t, 1, st.Swim.KeysInstalled)
	require.Eventually(t, func() bool { return seed.heard.Load() > 0 }, 20*time.Second, 50*time.Millisecond,
		"the released site never reached its seed: the seed could not have seen a send")
}

// seedListener is a SWIM seed that answers nothing and counts what
// reaches it: TCP connections and UDP datagrams.
type seedListener struct {
	addr  string
	heard atomic.Int64
}

func listenSeed(t *testing.T) *seedListener {
	t.Helper()
	s := &seedListener{addr: testnet.FreeTCPUDPAddr(t)}
	var lc net.ListenConfig
	tcp, err := lc.Listen(context.Background(), "tcp", s.addr)
	require.NoError(t, err)
	udp, err := lc.ListenPacket(context.Background(), "udp", s.addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tcp.Close(); _ = udp.Close() })
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			s.heard.Add(1)
			_ = c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			s.heard.Add(1)
		}
	}()
	return s
}

// requireNotListening fails unless nothing listens on addr, TCP or UDP:
// a connection is refused and the UDP port can be bound.
func requireNotListening(t *testing.T, addr string) {
	t.Helper()
	c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", addr)
	if err == nil {
		_ = c.Close()
		t.Fatalf("SWIM's TCP port %s took a connection while held", addr)
	}
	require.True(t, errors.Is(err, syscall.ECONNREFUSED), "dialling %s: %v", addr, err)
	udp, err := (&net.ListenConfig{}).ListenPacket(context.Background(), "udp", addr)
	require.NoError(t, err, "SWIM's UDP port %s is bound while held", addr)
	require.NoError(t, udp.Close())
}
