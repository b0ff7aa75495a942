package health

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestProbeExitsZeroOnlyOn2xx(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/startupz" {
			_, _ = w.Write([]byte("ok"))
			return
		}
		http.Error(w, "not yet", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	assert.Equal(t, ProbeOK, Probe("gridsync-sidecar", []string{srv.URL + "/startupz"}, &out, &errOut))
	assert.Contains(t, out.String(), "200 ok")
	assert.Equal(t, ProbeFailed, Probe("gridsync-sidecar", []string{srv.URL + "/readyz"}, &out, &errOut))
	assert.Equal(t, ProbeFailed, Probe("gridsync-sidecar", []string{"--timeout", "1s", "http://127.0.0.1:1/"}, &out, &errOut))
	assert.Equal(t, ProbeMisused, Probe("gridsync-sidecar", nil, &out, &errOut))
}
