package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	deliveryreport "github.com/gridsync/gridsync/delivery/report"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/shared/syncflags"
)

// A sidecar reads the compressed form of the envelope's key only, which is
// the one the agent compresses: told to read another key, it says it reads
// the plain form alone, and the agent keeps that form for its gateway.
func TestTheReportSaysWhatTheSidecarReads(t *testing.T) {
	cfg := &syncflags.Config{ExpectedNamespace: "gw", ExpectedGateway: "edge", PodName: "edge-1",
		DataKey: envelope.DataKeyEnvelope, OverlayEncoding: "zstd", MaxBytes: 4 << 20}
	rep := reportOf(cfg, overlaysync.Status{State: deliveryreport.StateCold})
	assert.Equal(t, []string{deliveryreport.FormPlain, deliveryreport.FormZstd}, rep.Reads)
	assert.Equal(t, "zstd", rep.Encoding)
	assert.Equal(t, 4<<20, rep.MaxBytes)
	assert.NoError(t, rep.Validate())

	cfg.DataKey = envelope.DataKeyBare
	rep = reportOf(cfg, overlaysync.Status{State: deliveryreport.StateCold})
	assert.Equal(t, []string{deliveryreport.FormPlain}, rep.Reads)
	assert.False(t, rep.ReadsForm(deliveryreport.FormZstd))
}
