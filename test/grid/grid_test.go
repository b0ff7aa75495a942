// Package grid runs a grid of two real sites across an emulated WAN: each
// site its own control plane and node, the agent and the gateway
// installed by their charts from the project's images, the sites reaching
// each other only through translated load balancer addresses (package
// testgrid). It proves what loopback cannot: the advertise settings and
// the translation, a provider of one site reaching the other site's
// gateway file through SWIM and the mutual-TLS probe over a delayed, lossy
// link, and a cut link withdrawing the routes and a healed one bringing
// them back.
package grid

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/test/testgrid"
	"github.com/gridsync/gridsync/test/testwan"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

func TestMain(m *testing.M) { testwan.Main(m) }

// The link: 100 ms round trips with jitter, 1 % of packets lost each way.
var link = testwan.Link{Delay: 50 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.01}

func TestTwoNodesJoinOverAWANAndLiveThroughACut(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	g, err := testgrid.Start(ctx, testgrid.Options{Sites: []string{"east", "west"}, Link: link, Logf: t.Logf})
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range g.Sites {
				if s != nil && s.Node != nil {
					t.Log(s.Describe(context.Background()))
				}
			}
		}
		assert.NoError(t, g.Stop())
	})
	require.NoError(t, err)
	east, west := g.Sites[0], g.Sites[1]
	pairs := [][2]*testgrid.Site{{east, west}, {west, east}}

	// Joined and trusted: each site's gateway file holds the other's
	// provider, fresh, once its GridSite is Active (the mutual-TLS probe
	// of the other's gateway, through its load balancer address, passed).
	began := time.Now()
	for _, p := range pairs {
		s, peer := p[0], p[1]
		waitUntil(t, ctx, 90*time.Second, fmt.Sprintf("%s trusts %s and routes to its provider", s.Name, peer.Name), func() string {
			st := s.SiteStatus(ctx, peer.Name)
			present, fresh := routes(ctx, s, peer.Name)
			if st.Phase == sitetrust.PhaseActive && present && fresh {
				return ""
			}
			return fmt.Sprintf("GridSite %q (%s: %s), routes present %v fresh %v", st.Phase, st.Reason, st.Message, present, fresh)
		})
		var gs v1alpha1.GridSite
		require.NoError(t, s.Client.Get(ctx, client.ObjectKey{Name: testgrid.Network + "-" + peer.Name}, &gs))
		require.NotNil(t, gs.Spec.GatewayEndpoint)
		assert.Equal(t, netip.AddrPortFrom(peer.Addr, testgrid.GridPort).String(), gs.Spec.GatewayEndpoint.Address,
			"%s probes %s's gateway at the address it advertises, its load balancer's", s.Name, peer.Name)
	}
	t.Logf("both sites trust and route to each other %s after their load balancer addresses led to their pods", time.Since(began).Round(time.Millisecond))

	// Cut: each side suspects the other, declares it dead and withdraws
	// its routes (the probe of the other's gateway fails too). Both sides
	// are watched at once, every transition with its time.
	cut := time.Now()
	g.Lab.Partition([]int{0}, []int{1})
	seen := watchBoth(t, ctx, pairs, cut, "declares the other dead and withdraws its routes", func(s, peer *testgrid.Site) (string, bool) {
		state, err := s.MemberState(ctx, peer.Name)
		if err != nil {
			return err.Error(), false
		}
		st := s.SiteStatus(ctx, peer.Name)
		present, _ := routes(ctx, s, peer.Name)
		return fmt.Sprintf("%s, GridSite %s, routes %s", state, st.Phase, map[bool]string{true: "present", false: "withdrawn"}[present]),
			state == "Dead" && !present
	})
	for _, p := range pairs {
		assert.True(t, anyHas(seen[p[0].Name], "Suspect,"), "%s suspected %s before declaring it dead: %v", p[0].Name, p[1].Name, seen[p[0].Name])
	}

	// Heal: the sites find each other again, trust is probed again, the
	// routes come back fresh.
	healed := time.Now()
	g.Lab.Heal()
	watchBoth(t, ctx, pairs, healed, "has the other back, trusted and routed to", func(s, peer *testgrid.Site) (string, bool) {
		state, err := s.MemberState(ctx, peer.Name)
		if err != nil {
			return err.Error(), false
		}
		st := s.SiteStatus(ctx, peer.Name)
		present, fresh := routes(ctx, s, peer.Name)
		return fmt.Sprintf("%s, GridSite %s, routes present %v fresh %v", state, st.Phase, present, fresh),
			state == "Alive" && st.Phase == sitetrust.PhaseActive && present && fresh
	})
	st := g.Lab.Stats()
	t.Logf("the lab: %d packets forwarded, %d lost, %d cut", st.Forwarded, st.Lost, st.Cut)
	assert.Positive(t, st.Lost, "the link lost packets: the grid held over loss, not over a clean link")
	assert.Positive(t, st.Cut)
}

func routes(ctx context.Context, s *testgrid.Site, peer string) (present, fresh bool) {
	cands, err := s.Candidates(ctx)
	if err != nil {
		return false, false
	}
	return testgrid.Routes(cands, peer)
}

func anyHas(seen []string, part string) bool {
	for _, s := range seen {
		if strings.Contains(s, part) {
			return true
		}
	}
	return false
}

// watchBoth polls every pair's site until cond holds for each, logging
// each site's every change of what cond says with its time since from,
// and returns those changes by site. It fails the test after 90 s.
func watchBoth(t *testing.T, ctx context.Context, pairs [][2]*testgrid.Site, from time.Time, what string,
	cond func(s, peer *testgrid.Site) (string, bool),
) map[string][]string {
	t.Helper()
	seen := map[string][]string{}
	done := map[string]bool{}
	deadline := time.Now().Add(90 * time.Second)
	for {
		all := true
		for _, p := range pairs {
			s, peer := p[0], p[1]
			if done[s.Name] {
				continue
			}
			now, ok := cond(s, peer)
			if h := seen[s.Name]; len(h) == 0 || !strings.HasPrefix(h[len(h)-1], now+" at ") {
				seen[s.Name] = append(h, fmt.Sprintf("%s at %.1f s", now, time.Since(from).Seconds()))
			}
			done[s.Name] = ok
			all = all && ok
		}
		if all {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not every site within 90 s: %v", what, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range pairs {
		t.Logf("%s %s: %s", p[0].Name, what, strings.Join(seen[p[0].Name], "; "))
	}
	return seen
}

// waitUntil polls cond (which says what is still missing, "" when done)
// until it is done, failing the test with the last word after timeout.
func waitUntil(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		now := cond()
		if now == "" {
			return
		}
		if now != last {
			t.Logf("%s: %s", what, now)
			last = now
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not within %s; last: %s", what, timeout, now)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
