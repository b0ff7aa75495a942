package controller_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
)

// Two replicas: one leads and publishes, the other stays passive until
// the leader stops, then takes over.
func TestSecondReplicaStaysPassiveUntilTheLeaderStops(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	e.create(network)
	p := e.provider("p", network.Name, "m1")
	e.create(p)

	first := e.startAgent()
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })
	require.True(t, first.leading())
	second := e.startAgent()
	time.Sleep(3 * time.Second) // several retry periods
	assert.False(t, second.leading(), "a second replica must not lead while the first does")

	first.stop()
	e.eventually("the second replica leads", func() (bool, string) { return second.leading(), "passive" })
	update(e, p, func(p *v1alpha1.InferenceProvider) { p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: "m2"}) })
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 2 })
}
