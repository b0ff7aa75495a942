package charts

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// prometheusOperator is the release whose CRDs the monitoring objects are
// checked against; its module on the Go module proxy carries the manifests.
const prometheusOperator = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

var monitoringOnce sync.Once

// installMonitoringCRDs installs ServiceMonitor, PodMonitor and
// PrometheusRule from the pinned Prometheus Operator module, downloaded
// (once, checksum-verified) by the go command.
func installMonitoringCRDs(t *testing.T) {
	t.Helper()
	var err error
	monitoringOnce.Do(func() {
		var out []byte
		out, err = exec.CommandContext(t.Context(), "go", "mod", "download", "-json", prometheusOperator).Output()
		if err != nil {
			return
		}
		var mod struct{ Dir, Error string }
		if err = json.Unmarshal(out, &mod); err != nil {
			return
		}
		require.Empty(t, mod.Error)
		dir := filepath.Join(mod.Dir, "example", "prometheus-operator-crd")
		err = cp.InstallCRDs(t.Context(),
			filepath.Join(dir, "monitoring.coreos.com_servicemonitors.yaml"),
			filepath.Join(dir, "monitoring.coreos.com_podmonitors.yaml"),
			filepath.Join(dir, "monitoring.coreos.com_prometheusrules.yaml"))
	})
	require.NoError(t, err, "install the Prometheus Operator CRDs from %s", prometheusOperator)
}
