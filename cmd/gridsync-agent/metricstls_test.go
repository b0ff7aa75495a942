package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/tlsidentity"
	"github.com/gridsync/gridsync/test/testpki"
)

// The signals listener and the metrics port each load an identity into the
// agent's one registry: their gridsync_identity_* series stand side by
// side, told apart by listener (the second registration used to collide).
func TestBothListenersExportTheirIdentity(t *testing.T) {
	root := testpki.NewRoot(t, "grid-ca")
	reg := prometheus.NewRegistry()
	for _, listener := range []string{"signals", "metrics"} {
		dir := t.TempDir()
		cert, key := root.Leaf(t, listener+".grid.internal", testpki.Opts{})
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.crt"), cert, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600))
		_, err := tlsidentity.New(tlsidentity.Options{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"),
			RequireServerAuth: true, Registerer: identityRegisterer(reg, listener)})
		require.NoError(t, err, listener)
	}
	families, err := reg.Gather()
	require.NoError(t, err)
	listeners := map[string]bool{}
	for _, f := range families {
		if f.GetName() != "gridsync_identity_not_after_timestamp_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "listener" {
					listeners[l.GetValue()] = true
				}
			}
		}
	}
	assert.Equal(t, map[string]bool{"signals": true, "metrics": true}, listeners)
	assert.Nil(t, identityRegisterer(nil, "metrics"), "no registry, nothing registered")
}
