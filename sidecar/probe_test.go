package main

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
	assert.Equal(t, exitOK, run([]string{"probe", srv.URL + "/startupz"}, nil, &out, &errOut))
	assert.Contains(t, out.String(), "200 ok")
	assert.Equal(t, exitFailure, run([]string{"probe", srv.URL + "/readyz"}, nil, &out, &errOut))
	assert.Equal(t, exitFailure, run([]string{"probe", "--timeout", "1s", "http://127.0.0.1:1/"}, nil, &out, &errOut))
	assert.Equal(t, exitUsage, run([]string{"probe"}, nil, &out, &errOut))
}
