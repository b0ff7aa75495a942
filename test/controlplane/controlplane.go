package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	startTimeout = 60 * time.Second
	stopGrace    = 10 * time.Second
)

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	dir         string
	binDir      string
	pki         *pki
	etcdURL     string
	apiPort     int
	apiArgs     []string
	host        string
	adminConfig *rest.Config

	mu        sync.Mutex
	etcd      *Process
	apiserver *Process
}

// Start builds nothing: it runs the binaries `make tools` built, on free
// loopback ports, with state in a new temporary folder, and returns once
// kube-apiserver reports ready.
func Start(ctx context.Context) (*ControlPlane, error) {
	binDir, err := findBinDir()
	if err != nil {
		return nil, err
	}
	// Its servers died with a test binary that died: only the folder is
	// left to remove.
	RemoveAbandoned(folderPrefix, func(dir string) { _ = os.RemoveAll(dir) })
	// The servers' ports are found free, released, and bound a moment
	// later: another process may take one in between (any outgoing
	// connection's local port comes from the same range). A server that
	// finds its port taken starts the whole control plane again, on
	// other ports.
	for attempt := 1; ; attempt++ {
		dir, err := OwnedTempDir(folderPrefix)
		if err != nil {
			return nil, fmt.Errorf("create control plane folder: %w", err)
		}
		cp := &ControlPlane{dir: dir, binDir: binDir}
		err = cp.start(ctx)
		if err == nil {
			return cp, nil
		}
		_ = cp.Stop()
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return nil, err
		}
	}
}

func (cp *ControlPlane) start(ctx context.Context) error {
	var err error
	if cp.pki, err = newPKI(cp.dir); err != nil {
		return fmt.Errorf("create control plane certificates: %w", err)
	}
	ports, err := FreePorts(3)
	if err != nil {
		return err
	}
	if err := cp.startEtcd(ctx, ports[0], ports[1]); err != nil {
		return err
	}
	cp.apiPort = ports[2]
	cp.host = "https://127.0.0.1:" + strconv.Itoa(cp.apiPort)
	cp.adminConfig = &rest.Config{
		Host: cp.host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   cp.pki.caPEM,
			CertData: cp.pki.adminCertPEM,
			KeyData:  cp.pki.adminKeyPEM,
		},
		QPS:   -1, // tests must not be slowed by client-side throttling
		Burst: -1,
	}
	issuer := "https://kubernetes.default.svc"
	cp.apiArgs = []string{
		"--etcd-servers=" + cp.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(cp.apiPort),
		"--cert-dir=" + filepath.Join(cp.dir, "apiserver-certs"),
		"--tls-cert-file=" + cp.pki.servingCert,
		"--tls-private-key-file=" + cp.pki.servingKey,
		"--client-ca-file=" + cp.pki.clientCA,
		// The Node authorizer and NodeRestriction confine a test node's
		// kubelet to its own pods' objects, as in a real cluster.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=" + issuer,
		"--api-audiences=" + issuer,
		"--service-account-key-file=" + cp.pki.serviceAccount,
		"--service-account-signing-key-file=" + cp.pki.serviceAccount,
		"--service-cluster-ip-range=10.96.0.0/24",
		// Tests compact etcd themselves when they want 410 Gone; automatic
		// compaction would make watch tests flaky.
		"--etcd-compaction-interval=0",
		"--profiling=false",
		"--endpoint-reconciler-type=none",
	}
	return cp.StartAPIServer(ctx)
}

func (cp *ControlPlane) startEtcd(ctx context.Context, clientPort, peerPort int) error {
	client := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	p, err := startProcess("etcd", filepath.Join(cp.dir, "etcd.log"), filepath.Join(cp.binDir, "etcd"),
		"--name=default",
		"--data-dir="+filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls="+client,
		"--advertise-client-urls="+client,
		"--listen-peer-urls="+peer,
		"--initial-advertise-peer-urls="+peer,
		"--initial-cluster=default="+peer,
		"--log-level=warn",
		// Test data is thrown away; fsync only slows every write down.
		"--unsafe-no-fsync=true",
	)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.etcd = p
	cp.mu.Unlock()
	cp.etcdURL = client
	httpClient := &http.Client{Timeout: time.Second}
	err = p.WaitUntil(ctx, startTimeout, func() bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, client+"/health", http.NoBody)
		if err != nil {
			return false
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		return fmt.Errorf("etcd did not become healthy: %w\n%s", err, p.LogTail())
	}
	return nil
}

// StartAPIServer starts kube-apiserver (again) on the same port and etcd and
// waits until /readyz answers 200.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	cp.mu.Lock()
	if cp.apiserver != nil && cp.apiserver.Running() {
		cp.mu.Unlock()
		return errors.New("kube-apiserver is already running")
	}
	cp.mu.Unlock()
	p, err := startProcess("kube-apiserver", filepath.Join(cp.dir, "kube-apiserver.log"), filepath.Join(cp.binDir, "kube-apiserver"), cp.apiArgs...)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.apiserver = p
	cp.mu.Unlock()

	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	err = p.WaitUntil(ctx, startTimeout, func() bool {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var status int
		client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(rctx).StatusCode(&status)
		return status == http.StatusOK
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver did not become ready: %w\n%s", err, p.LogTail())
	}
	return nil
}

// StopAPIServer stops kube-apiserver and leaves etcd running, so that a
// test can observe clients while the API is unreachable.
func (cp *ControlPlane) StopAPIServer() error {
	cp.mu.Lock()
	p := cp.apiserver
	cp.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Stop(stopGrace)
}

// Stop stops kube-apiserver and etcd and removes the control plane's
// folder. It is safe to call more than once.
func (cp *ControlPlane) Stop() error {
	cp.mu.Lock()
	api, etcd := cp.apiserver, cp.etcd
	cp.mu.Unlock()
	var errs []error
	if api != nil {
		errs = append(errs, api.Stop(stopGrace))
	}
	if etcd != nil {
		errs = append(errs, etcd.Stop(stopGrace))
	}
	if cp.dir != "" {
		errs = append(errs, os.RemoveAll(cp.dir))
	}
	return errors.Join(errs...)
}

// AdminConfig returns a new admin (system:masters) client configuration.
func (cp *ControlPlane) AdminConfig() *rest.Config {
	return rest.CopyConfig(cp.adminConfig)
}

// AdminClient returns an admin clientset.
func (cp *ControlPlane) AdminClient() kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(cp.AdminConfig())
}

// Host is kube-apiserver's URL.
func (cp *ControlPlane) Host() string { return cp.host }

// PIDs returns the process IDs of the running servers.
func (cp *ControlPlane) PIDs() []int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var pids []int
	for _, p := range []*Process{cp.etcd, cp.apiserver} {
		if p != nil && p.Running() {
			pids = append(pids, p.cmd.Process.Pid)
		}
	}
	return pids
}

// APIServerPID is kube-apiserver's process ID, 0 while it is stopped: for
// benchmarks that read its CPU time and memory from /proc.
func (cp *ControlPlane) APIServerPID() int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.apiserver == nil || !cp.apiserver.Running() {
		return 0
	}
	return cp.apiserver.cmd.Process.Pid
}

const folderPrefix = "gridsync-controlplane-"
