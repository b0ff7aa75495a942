// Package testregistry runs the pinned CNCF distribution registry (built
// by `make tools`) on a loopback port over TLS, with a certificate of a CA
// of its own, storing what is pushed below a folder: the registry the
// publishing tests push a release to, a node pulls it from, and the demo
// shows.
package testregistry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testpki"
)

// Registry is a running registry.
type Registry struct {
	// Host is its host:port, on 127.0.0.1.
	Host string
	// CAFile holds CA, the PEM its certificate is checked against.
	CAFile string
	CA     []byte
	// Transport trusts CA: a client of the registry.
	Transport *http.Transport

	proc *controlplane.Process
}

// Bin is the pinned registry `make tools` built, or an error saying to
// build it.
func Bin() (string, error) {
	dir, err := controlplane.BinDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "registry")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the pinned registry is not built: run `make tools` (or set %s): %w", controlplane.BinDirEnv, err)
	}
	return p, nil
}

// Start starts the registry with its configuration, certificate and
// storage below dir, and returns once it serves. Stop it with Stop.
func Start(ctx context.Context, dir string) (*Registry, error) {
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	caPEM, certPEM, keyPEM, err := testpki.LoopbackServer("registry")
	if err != nil {
		return nil, err
	}
	r := &Registry{CAFile: filepath.Join(dir, "ca.pem"), CA: caPEM}
	certFile, keyFile := filepath.Join(dir, "registry.pem"), filepath.Join(dir, "registry-key.pem")
	for f, data := range map[string][]byte{r.CAFile: caPEM, certFile: certPEM, keyFile: keyPEM} {
		if err := os.WriteFile(f, data, 0o600); err != nil {
			return nil, err
		}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	r.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	client := &http.Client{Transport: r.Transport, Timeout: 2 * time.Second}
	for attempt := 1; ; attempt++ {
		ports, err := controlplane.FreePorts(1)
		if err != nil {
			return nil, err
		}
		r.Host = "127.0.0.1:" + strconv.Itoa(ports[0])
		config := filepath.Join(dir, "registry.yaml")
		if err := os.WriteFile(config, []byte(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: `+filepath.Join(dir, "registry-storage")+`
http:
  addr: `+r.Host+`
  tls:
    certificate: `+certFile+`
    key: `+keyFile+`
`), 0o600); err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, "serve", config) //nolint:noctx // a server lives until Stop
		// No traces leave the registry (its default exporter would send
		// them to a collector on this machine).
		cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_SDK_DISABLED=true")
		if r.proc, err = controlplane.StartProcess("registry", filepath.Join(dir, "registry.log"), cmd); err != nil {
			return nil, err
		}
		err = r.proc.WaitUntil(ctx, 30*time.Second, func() bool { return serves(ctx, client, "https://"+r.Host+"/v2/") })
		if err == nil {
			return r, nil
		}
		tail := r.proc.LogTail()
		_ = r.proc.Stop(time.Second)
		if attempt < 3 && strings.Contains(tail, "address already in use") {
			continue // the port was taken between finding it and binding it
		}
		return nil, fmt.Errorf("the registry did not serve: %w\n%s", err, tail)
	}
}

func serves(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// LogTail is the end of the registry's log.
func (r *Registry) LogTail() string { return r.proc.LogTail() }

// Stop stops the registry.
func (r *Registry) Stop() error {
	r.Transport.CloseIdleConnections()
	return r.proc.Stop(5 * time.Second)
}
