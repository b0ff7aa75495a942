package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/internal/cli/drain"
	"github.com/gridsync/gridsync/shared/envelope"
)

// admissionIn reads the admission states in a pod's overlay file.
func admissionIn(t *testing.T, p *pod) []string {
	t.Helper()
	data, err := os.ReadFile(p.output)
	require.NoError(t, err)
	var doc struct {
		Overlay envelope.Overlay `json:"overlay"`
	}
	require.NoError(t, json.Unmarshal(data, &doc))
	var out []string
	for _, c := range doc.Overlay.Candidates {
		out = append(out, c.AdmissionState)
	}
	return out
}

// The drain command returns once every pod of every gateway reports the
// revision that lists the provider existing_only, and says so; with a pod
// held on an older revision it keeps waiting and says how many pods serve
// the new one.
func TestDrainWaitsForEveryPodToServeTheDrainingRevision(t *testing.T) {
	e := newEnv(t)
	gw, network, provider, listener := e.reportingNetwork(e.watchedReports())
	pods := []*pod{e.startPod(network, gw, "edge-a", listener), e.startPod(network, gw, "edge-b", listener)}
	e.delivery(network, gw.Name, func(_ v1alpha1.GridNetworkStatus, d *v1alpha1.GatewayDelivery) bool {
		return d != nil && d.PodsOnRevision == 2
	})

	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, drain.Run(ctx, e.admin, drain.Options{Provider: provider.Name, Out: &out, Poll: 100 * time.Millisecond}))
	assert.Contains(t, out.String(), "gateway "+gw.Namespace+"/"+gw.Name+": revision ")
	assert.Contains(t, out.String(), "lists it existing_only, served by 2 of 2 pods")
	for _, p := range pods {
		assert.Equal(t, []string{"existing_only"}, admissionIn(t, p), "the pods serve it when the command returns")
	}

	// One pod held on the draining revision: undrain waits for it.
	pods[1].stopSync()
	out.Reset()
	short, cancelShort := context.WithTimeout(e.ctx, 4*time.Second)
	defer cancelShort()
	err := drain.Run(short, e.admin, drain.Options{Provider: provider.Name, Undrain: true, Out: &out, Poll: 100 * time.Millisecond})
	require.ErrorIs(t, err, drain.ErrWaiting)
	assert.Contains(t, err.Error(), "on 1 of 2 pods")
	assert.Empty(t, out.String())
	assert.Equal(t, []string{"new_and_existing"}, admissionIn(t, pods[0]))
}
