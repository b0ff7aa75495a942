package attack

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/hack/release/sign"
)

// A registry that answers every manifest with an endless body, a second
// one that answers each with a body declared gigabytes long: make verify
// (release verify) trusts nothing it reads there before the signature
// holds, so it stops reading at its bound, refuses, and stays small.
func TestAHostileRegistryCannotSwellTheVerifier(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "release")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/gridsync/gridsync/hack/release")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build the release command: %s", out)
	// The verifier needs a key to start; no signature of the hostile
	// registry ever reaches it.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	require.NoError(t, err)
	pub := filepath.Join(dir, "cosign.pub")
	require.NoError(t, os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600))

	for _, declared := range []bool{false, true} {
		var served atomic.Int64
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2/" {
				return
			}
			w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
			w.Header().Set("Docker-Content-Digest", "sha256:"+strings.Repeat("a", 64))
			if declared {
				w.Header().Set("Content-Length", "8589934592")
			}
			chunk := []byte(strings.Repeat(" ", 64<<10))
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				n, err := w.Write(chunk)
				served.Add(int64(n))
				if err != nil {
					return
				}
			}
		}))
		srv.StartTLS()
		ca := filepath.Join(dir, "ca.pem")
		require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
		ref := strings.TrimPrefix(srv.URL, "https://") + "/gridsync/gridsync-agent@sha256:" + strings.Repeat("b", 64)

		cmd := exec.CommandContext(t.Context(), bin, "verify", "-key", pub, "-ca", ca, ref)
		var printed bytes.Buffer
		cmd.Stdout, cmd.Stderr = &printed, &printed
		rssMiB, took, err := runPolled(cmd)
		srv.Close()
		// Refused for what the registry served being past the bound, not
		// for anything else, and measured (a process never sampled has
		// no peak to compare).
		refused := err != nil && strings.Contains(printed.String(), "the registry answers") && served.Load() > 0 && rssMiB > 0
		name := "hostile_registry_endless_manifest"
		if declared {
			name = "hostile_registry_declared_huge_manifest"
		}
		// The bound is 4 MiB a manifest; the process, its runtime and
		// TLS included, stays well inside 64 MiB, and the refusal comes
		// in seconds, not when the registry chooses to stop.
		held := refused && rssMiB < 64 && took < 10*time.Second
		report(t, name, held,
			figure{"bound_mib", sign.MaxManifestSize >> 20},
			figure{"served_mib", float64(served.Load()) / (1 << 20)},
			figure{"verifier_rss_mib", rssMiB},
			figure{"refused_after_s", took.Seconds()})
		if !held {
			t.Logf("release verify printed:\n%s", printed.String())
		}
	}
}
