package render_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/admission"
	"github.com/gridsync/gridsync/controller/render"
	"github.com/gridsync/gridsync/shared/envelope"
)

var east = render.Gateway{Name: "edge", Namespace: "grid-system", Site: "east"}

func provider(name string, phase v1alpha1.ProviderPhase, models ...string) render.Provider {
	return render.Provider{Name: name, Cluster: "cluster-" + name, Models: models, Phase: phase}
}

func onlySites(sites ...string) labels.Selector {
	s, err := labels.Parse(v1alpha1.SiteLabel + " in (" + joinComma(sites) + ")")
	if err != nil {
		panic(err)
	}
	return s
}

func joinComma(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ","
		}
		out += v
	}
	return out
}

type want struct{ name, site string }

func names(o envelope.Overlay) []want {
	var out []want
	for _, c := range o.Candidates {
		out = append(out, want{c.Name, c.Site})
	}
	return out
}

func TestOverlayRules(t *testing.T) {
	restricted := provider("west", v1alpha1.ProviderAvailable, "m1")
	restricted.Sites = onlySites("west")
	admitted := provider("mid", v1alpha1.ProviderAvailable, "m1")
	admitted.Sites = onlySites("east", "west")

	tests := []struct {
		name      string
		providers []render.Provider
		want      []want
	}{
		{"no providers is an empty, authoritative overlay", nil, nil},
		{"one candidate per model", []render.Provider{provider("a", v1alpha1.ProviderAvailable, "m2", "m1")},
			[]want{{"m1", "a"}, {"m2", "a"}}},
		{"unavailable providers are left out", []render.Provider{
			provider("a", v1alpha1.ProviderUnavailable, "m1"), provider("b", v1alpha1.ProviderAvailable, "m1"),
		}, []want{{"m1", "b"}}},
		{"pending providers are left out", []render.Provider{provider("a", v1alpha1.ProviderPending, "m1")}, nil},
		{"degraded providers come after fresh ones", []render.Provider{
			provider("a", v1alpha1.ProviderDegraded, "m1"), provider("b", v1alpha1.ProviderAvailable, "m1"),
		}, []want{{"m1", "b"}, {"m1", "a"}}},
		{"the access policy keeps other sites out", []render.Provider{restricted, admitted},
			[]want{{"m1", "mid"}}},
		{"order is site, then model", []render.Provider{
			provider("b", v1alpha1.ProviderAvailable, "m1"), provider("a", v1alpha1.ProviderAvailable, "z", "m9"),
		}, []want{{"m9", "a"}, {"z", "a"}, {"m1", "b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := render.Overlay("net", east, tt.providers)
			assert.Equal(t, "net", o.Network)
			assert.Equal(t, "east", o.LocalSite)
			require.NotNil(t, o.Candidates, "an empty overlay still has a candidate list")
			assert.Equal(t, tt.want, names(o))
			for i, c := range o.Candidates {
				require.NotNil(t, c.Rank)
				assert.Equal(t, int64(i), *c.Rank, "rank is the position")
				assert.Equal(t, envelope.StableID(c.Kind, c.Name, c.Site, c.Cluster), c.StableID)
				assert.Equal(t, envelope.CandidateKindInferenceModel, c.Kind)
			}
		})
	}
}

func TestOverlayCarriesFreshnessAndCredentialReference(t *testing.T) {
	a := provider("a", v1alpha1.ProviderAvailable, "m")
	a.Credential = &envelope.Credential{Strategy: "bearer_token", SecretRef: envelope.SecretRef{Name: "s", Namespace: "n", Key: "k"}}
	d := provider("d", v1alpha1.ProviderDegraded, "m")
	o := render.Overlay("net", east, []render.Provider{d, a})
	require.Len(t, o.Candidates, 2)
	assert.True(t, o.Candidates[0].Fresh)
	assert.Equal(t, a.Credential, o.Candidates[0].Credential)
	assert.NotSame(t, a.Credential, o.Candidates[0].Credential, "the overlay does not share the input's reference")
	assert.False(t, o.Candidates[1].Fresh)
	assert.Nil(t, o.Candidates[1].Credential)
	assert.Equal(t, "cluster-a", o.Candidates[0].Cluster)
}

// Providers come from a cache in no particular order; the overlay, and so
// the revision, must not depend on it.
func TestOverlayDoesNotDependOnInputOrder(t *testing.T) {
	var providers []render.Provider
	for i := range 40 {
		phase := v1alpha1.ProviderAvailable
		if i%5 == 0 {
			phase = v1alpha1.ProviderDegraded
		}
		providers = append(providers, provider(string(rune('a'+i%26))+string(rune('a'+i/26)), phase, "m1", "m2", "m3"))
	}
	scope := envelope.Scope{Network: "net", Gateway: east.Name, Namespace: east.Namespace, LocalSite: east.Site}
	_, first, err := envelope.Build(render.Overlay("net", east, providers), scope, envelope.Provenance{})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		rng.Shuffle(len(providers), func(i, j int) { providers[i], providers[j] = providers[j], providers[i] })
		_, again, err := envelope.Build(render.Overlay("net", east, providers), scope, envelope.Provenance{})
		require.NoError(t, err)
		require.Equal(t, first, again)
	}
}

// The network's site policy: a denied site's providers reach no overlay
// and its gateways get an empty one; without defaultAllow a gateway uses
// only its own site's providers.
func TestOverlayFollowsTheNetworksSitePolicy(t *testing.T) {
	providers := []render.Provider{
		provider("east", v1alpha1.ProviderAvailable, "m1"),
		provider("west", v1alpha1.ProviderAvailable, "m1"),
		provider("untrusted-partner", v1alpha1.ProviderAvailable, "m1"),
	}
	deny := render.SitePolicy{Denied: map[string]bool{"untrusted-partner": true}}
	tests := []struct {
		name   string
		gw     render.Gateway
		policy render.SitePolicy
		want   []want
	}{
		{"no policy", east, render.SitePolicy{}, []want{{"m1", "east"}, {"m1", "untrusted-partner"}, {"m1", "west"}}},
		{"a denied site's providers are left out", east, deny, []want{{"m1", "east"}, {"m1", "west"}}},
		{"a denied site's gateway gets nothing", render.Gateway{Name: "gw", Namespace: "ns", Site: "untrusted-partner"}, deny, nil},
		{"without defaultAllow, the own site only", east, render.SitePolicy{OwnSiteOnly: true}, []want{{"m1", "east"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw := tt.gw
			gw.Policy = tt.policy
			o := render.Overlay("net", gw, providers)
			require.NotNil(t, o.Candidates, "an empty overlay is authoritative")
			assert.Equal(t, tt.want, names(o))
		})
	}
}

// Remote providers render with their site as site and cluster (the
// provider hop), no credential, not fresh while their site is away or
// they are Degraded, deduplicated per site and model, under the access
// and site policies, in one order with the local providers.
func TestOverlayRemoteProviders(t *testing.T) {
	gpuOnly, err := labels.Parse("grid.praxis.fast/site in (north)")
	require.NoError(t, err)
	local := []render.Provider{{Name: "local-a", Cluster: "local-a", Models: []string{"m1"}, Phase: v1alpha1.ProviderAvailable,
		Credential: &envelope.Credential{Strategy: "bearer_token", SecretRef: envelope.SecretRef{Name: "s", Namespace: "n", Key: "k"}}}}
	remote := []render.Remote{
		{Site: "west", Name: "w1", Models: []string{"m1", "m2"}, Phase: v1alpha1.ProviderAvailable},
		{Site: "west", Name: "w2", Models: []string{"m2"}, Phase: v1alpha1.ProviderDegraded},
		{Site: "north", Name: "n1", Models: []string{"m1"}, Phase: v1alpha1.ProviderAvailable, Stale: true},
		{Site: "north", Name: "n2", Models: []string{"m3"}, Phase: v1alpha1.ProviderUnavailable},
		{Site: "south", Name: "s1", Models: []string{"m1"}, Phase: v1alpha1.ProviderAvailable, Sites: gpuOnly},
	}
	o := render.Overlay("net", east, local, remote...)
	type cand struct {
		name, site, cluster string
		fresh, credential   bool
	}
	var got []cand
	for _, c := range o.Candidates {
		got = append(got, cand{c.Name, c.Site, c.Cluster, c.Fresh, c.Credential != nil})
		assert.Equal(t, envelope.StableID(c.Kind, c.Name, c.Site, c.Cluster), c.StableID)
	}
	assert.Equal(t, []cand{
		{"m1", "local-a", "local-a", true, true},
		{"m1", "west", "west", true, false},
		{"m2", "west", "west", true, false}, // w1 fresh, w2 degraded: one candidate, fresh
		{"m1", "north", "north", false, false},
	}, got)

	// Inputs in any order give the same overlay.
	reversed := slices.Clone(remote)
	slices.Reverse(reversed)
	assert.Equal(t, o, render.Overlay("net", east, local, reversed...))

	deny := east
	deny.Policy = render.SitePolicy{Denied: map[string]bool{"west": true}}
	for _, c := range render.Overlay("net", deny, nil, remote...).Candidates {
		assert.NotEqual(t, "west", c.Site, "a denied site's providers reach no overlay")
	}
	own := east
	own.Policy = render.SitePolicy{OwnSiteOnly: true}
	assert.Empty(t, render.Overlay("net", own, nil, remote...).Candidates)
}

// Admission comes first in the order: a pressured or drained provider's
// candidates follow every candidate that takes new sessions, even stale
// ones; a provider admitting none is left out; every candidate says its
// state.
func TestOverlayOrdersByAdmissionThenFreshness(t *testing.T) {
	pressured := provider("a-pressured", v1alpha1.ProviderAvailable, "m")
	pressured.Admission = admission.ExistingOnly
	stale := provider("b-stale", v1alpha1.ProviderDegraded, "m")
	fresh := provider("c-fresh", v1alpha1.ProviderAvailable, "m")
	fresh.Admission = admission.NewAndExisting
	out := provider("d-out", v1alpha1.ProviderAvailable, "m")
	out.Admission = admission.None
	o := render.Overlay("net", east, []render.Provider{pressured, stale, fresh, out})

	type row struct {
		site, admission string
		fresh           bool
		rank            int64
	}
	var got []row
	for _, c := range o.Candidates {
		got = append(got, row{c.Site, c.AdmissionState, c.Fresh, *c.Rank})
	}
	assert.Equal(t, []row{
		{"c-fresh", "new_and_existing", true, 0},
		{"b-stale", "new_and_existing", false, 1},
		{"a-pressured", "existing_only", true, 2},
	}, got)
}

// A remote site's candidate stands for every provider of the site serving
// the model: it takes new sessions when any of them does.
func TestRemoteCandidateTakesTheLeastRestrictiveAdmission(t *testing.T) {
	remote := func(name string, state admission.State) render.Remote {
		return render.Remote{Site: "west", Name: name, Models: []string{"m"}, Phase: v1alpha1.ProviderAvailable, Admission: state}
	}
	for _, tt := range []struct {
		states []admission.State
		want   string
	}{
		{[]admission.State{admission.ExistingOnly, admission.NewAndExisting}, "new_and_existing"},
		{[]admission.State{admission.ExistingOnly, admission.ExistingOnly}, "existing_only"},
		{[]admission.State{admission.None, admission.ExistingOnly}, "existing_only"},
		{[]admission.State{admission.None, ""}, "new_and_existing"},
	} {
		var remotes []render.Remote
		for i, s := range tt.states {
			remotes = append(remotes, remote(fmt.Sprintf("p%d", i), s))
		}
		o := render.Overlay("net", east, nil, remotes...)
		require.Len(t, o.Candidates, 1, "%v", tt.states)
		assert.Equal(t, tt.want, o.Candidates[0].AdmissionState, "%v", tt.states)
	}
	o := render.Overlay("net", east, nil, remote("p0", admission.None), remote("p1", admission.None))
	assert.Empty(t, o.Candidates, "no provider of the site admits anything")
}

// Each routing policy's order, tiers and selection groups, checked
// against a table; the overlay carries the selection policy asked for and
// passes the gateway's contract.
func TestRoutingPoliciesOrderAndGroupCandidates(t *testing.T) {
	gw := render.Gateway{Name: "edge", Namespace: "grid-system", Site: "east", Region: "us-east", Zone: "us-east-1a"}
	local := func(name string, phase v1alpha1.ProviderPhase, state admission.State) render.Provider {
		p := provider(name, phase, "m")
		p.Admission = state
		return p
	}
	remote := func(site, region, zone string) render.Remote {
		return render.Remote{Site: site, Name: "p", Models: []string{"m"}, Phase: v1alpha1.ProviderAvailable, Region: region, Zone: zone}
	}
	providers := []render.Provider{
		local("l1-fresh", v1alpha1.ProviderAvailable, ""),
		local("l2-stale", v1alpha1.ProviderDegraded, ""),
		local("l3-pressured", v1alpha1.ProviderAvailable, admission.ExistingOnly),
	}
	remotes := []render.Remote{
		remote("r1-zone", "us-east", "us-east-1a"), remote("r2-region", "us-east", "us-east-1b"),
		remote("r3-cross", "eu-west", "eu-west-1a"), remote("r4-unknown", "", ""),
	}
	type row struct {
		site, tier string
		group      int64
	}
	for _, tt := range []struct {
		name       string
		scoreFirst bool
		want       []row
	}{
		{"geographyFirst", false, []row{
			{"l1-fresh", "same_site", 0}, {"l2-stale", "same_site", 1}, {"r1-zone", "same_zone", 2}, {"r2-region", "same_region", 3},
			{"r3-cross", "cross_region", 4}, {"r4-unknown", "unknown", 5}, {"l3-pressured", "same_site", 6},
		}},
		{"scoreFirst", true, []row{
			{"l1-fresh", "same_site", 0}, {"r1-zone", "same_zone", 0}, {"r2-region", "same_region", 0}, {"r3-cross", "cross_region", 0},
			{"r4-unknown", "unknown", 0}, {"l2-stale", "same_site", 1}, {"l3-pressured", "same_site", 2},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := gw
			g.ScoreFirst, g.Selection = tt.scoreFirst, envelope.SelectionRoundRobin
			o := render.Overlay("net", g, providers, remotes...)
			var got []row
			for i, c := range o.Candidates {
				require.Equal(t, int64(i), *c.Rank)
				got = append(got, row{c.Site, c.SelectionTier, *c.SelectionGroup})
			}
			assert.Equal(t, tt.want, got)
			require.NotNil(t, o.SelectionPolicy)
			assert.Equal(t, "roundRobin", o.SelectionPolicy.Mode)
			passesTheContract(t, g, o)
		})
	}
	o := render.Overlay("net", gw, providers)
	assert.Nil(t, o.SelectionPolicy, "no selection policy asked for: none in the overlay")
}

// With a scoring strategy every candidate carries its score and the
// breakdown that explains it; the higher score goes first within a group
// (scoreFirst: before the tier), and scores never split a group.
func TestScoresOrderWithinGroupsByPolicy(t *testing.T) {
	gw := render.Gateway{Name: "edge", Namespace: "grid-system", Site: "east", Region: "us-east", Zone: "us-east-1a",
		Scored: true, Signal: admission.QueueDepth}
	scored := func(name string, score float64) render.Provider {
		p := provider(name, v1alpha1.ProviderAvailable, "m")
		p.Score = score
		return p
	}
	remote := func(site, name, region string, score float64) render.Remote {
		return render.Remote{Site: site, Name: name, Models: []string{"m"}, Phase: v1alpha1.ProviderAvailable,
			Region: region, Zone: region + "-1b", Score: score}
	}
	providers := []render.Provider{scored("a-busy", 0.2), scored("b-idle", 0.9), scored("c-half", 0.5)}
	remotes := []render.Remote{
		remote("r-near", "p1", "us-east", 0.3), remote("r-near", "p2", "us-east", 0.95), // one candidate: the best score
		remote("r-far", "p", "eu-west", 1),
	}
	type row struct {
		site  string
		score float64
		group int64
	}
	for _, tt := range []struct {
		name       string
		scoreFirst bool
		want       []row
	}{
		{"geographyFirst", false, []row{
			{"b-idle", 0.9, 0}, {"c-half", 0.5, 0}, {"a-busy", 0.2, 0}, {"r-near", 0.95, 1}, {"r-far", 1, 2},
		}},
		{"scoreFirst", true, []row{
			{"r-far", 1, 0}, {"r-near", 0.95, 0}, {"b-idle", 0.9, 0}, {"c-half", 0.5, 0}, {"a-busy", 0.2, 0},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := gw
			g.ScoreFirst = tt.scoreFirst
			o := render.Overlay("net", g, providers, remotes...)
			var got []row
			for _, c := range o.Candidates {
				require.NotNil(t, c.Score)
				require.NotNil(t, c.ScoreBreakdown)
				assert.Equal(t, envelope.ScoreBreakdown{QueueDepth: *c.Score, Total: *c.Score}, *c.ScoreBreakdown)
				got = append(got, row{c.Site, *c.Score, *c.SelectionGroup})
			}
			assert.Equal(t, tt.want, got)
			passesTheContract(t, g, o)
		})
	}
	unscored := gw
	unscored.Scored = false
	for _, c := range render.Overlay("net", unscored, providers, remotes...).Candidates {
		assert.Nil(t, c.Score, "no strategy asked for: no score")
		assert.Nil(t, c.ScoreBreakdown)
	}
}

// passesTheContract builds o as gw's envelope and validates it by the
// gateway's contract rules.
func passesTheContract(t *testing.T, gw render.Gateway, o envelope.Overlay) {
	t.Helper()
	scope := envelope.Scope{Network: o.Network, Gateway: gw.Name, Namespace: gw.Namespace, LocalSite: gw.Site}
	doc, revision, err := envelope.Build(o, scope, envelope.Provenance{Producer: "test"})
	require.NoError(t, err)
	res, err := envelope.Validate(doc, envelope.Options{Expect: scope})
	require.NoError(t, err)
	assert.Equal(t, revision, res.Revision)
}

// weightedRandom asks the gateway for random selection (the nearest mode
// of the contract) and gives every candidate its capacity weight: unset
// is 1, a site's providers of one model add up, and a gossiped weight is
// held to the schema's bound.
func TestWeightedSelectionCarriesCapacityWeights(t *testing.T) {
	gw := east
	gw.Weighted, gw.Selection = true, "weightedRandom"
	heavy := provider("heavy", v1alpha1.ProviderAvailable, "m")
	heavy.Weight = 3
	light := provider("light", v1alpha1.ProviderAvailable, "m")
	remotes := []render.Remote{
		{Site: "west", Name: "p1", Models: []string{"m"}, Phase: v1alpha1.ProviderAvailable, Weight: 2},
		{Site: "west", Name: "p2", Models: []string{"m"}, Phase: v1alpha1.ProviderAvailable, Weight: 5},
		{Site: "boastful", Name: "p", Models: []string{"m"}, Phase: v1alpha1.ProviderAvailable, Weight: 5000},
	}
	o := render.Overlay("net", gw, []render.Provider{heavy, light}, remotes...)
	require.NotNil(t, o.SelectionPolicy)
	assert.Equal(t, envelope.SelectionRandom, o.SelectionPolicy.Mode)
	got := map[string]int64{}
	for _, c := range o.Candidates {
		require.NotNil(t, c.SelectionWeight, c.Site)
		got[c.Site] = *c.SelectionWeight
	}
	assert.Equal(t, map[string]int64{"heavy": 3, "light": 1, "west": 7, "boastful": render.MaxWeight}, got)
	passesTheContract(t, gw, o)

	plain := east
	for _, c := range render.Overlay("net", plain, []render.Provider{heavy}).Candidates {
		assert.Nil(t, c.SelectionWeight, "no weighted selection asked for: no weight")
	}
}
