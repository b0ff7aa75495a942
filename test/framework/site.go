package framework

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crds "github.com/gridsync/gridsync/charts/gridsync-agent/files/crds"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testnet"
	"github.com/gridsync/gridsync/test/testproc"
)

// Site is one cluster's corner for an agent, as the agent's chart
// prepares it: the CRDs, the agent's ServiceAccount in AgentNS with
// exactly the chart's RBAC for Namespaces, and a kubeconfig with its
// token.
type Site struct {
	CP *controlplane.ControlPlane
	// ID is distinct for every site of the test binary: it is in the
	// namespaces' names, and a test names what it creates with it.
	ID int32
	// Name is the agent's --site-name; none when empty.
	Name string
	// AgentNS holds the agent's ServiceAccount and Lease.
	AgentNS string
	// Namespaces are the namespaces the agent watches; the first is the
	// site's own (Namespace).
	Namespaces []string
	// Kubeconfig is the agent's, for an agent run as a process; Config
	// the same, for an agent's controller run in the test's process.
	Kubeconfig string
	Config     *rest.Config
	// Admin is a client of the site's control plane that knows the Grid
	// types; nil for a Site set up with Setup alone.
	Admin client.WithWatch
	// SwimAddr is the agent's SWIM address on loopback, when the site has
	// one (TCP and UDP free).
	SwimAddr string
}

// SiteOptions say what differs between the suites' sites.
type SiteOptions struct {
	// Prefix names the namespaces: <prefix>-system-<ID> for the agent,
	// <prefix>-<ID> watched.
	Prefix string
	// Name is the site's name.
	Name string
	// More are further namespaces the agent watches, <prefix>-<more>-<ID>
	// each, after the site's own.
	More []string
	// Swim gives the site a SWIM address.
	Swim bool
}

var siteSeq atomic.Int32

// NextID is a number no other site or caller of this test binary got.
func NextID() int32 { return siteSeq.Add(1) }

// NewSite prepares a site on cp for the test: the chart's part (Setup)
// and an admin client. Sites of one test binary share cp's CRDs and
// nothing else.
func NewSite(t testing.TB, cp *controlplane.ControlPlane, opts SiteOptions) *Site {
	t.Helper()
	id := NextID()
	s := &Site{CP: cp, ID: id, Name: opts.Name, AgentNS: fmt.Sprintf("%s-system-%d", opts.Prefix, id),
		Namespaces: []string{fmt.Sprintf("%s-%d", opts.Prefix, id)}, Kubeconfig: filepath.Join(t.TempDir(), "kubeconfig")}
	for _, more := range opts.More {
		s.Namespaces = append(s.Namespaces, fmt.Sprintf("%s-%s-%d", opts.Prefix, more, id))
	}
	require.NoError(t, s.Setup(context.Background()))
	var err error
	s.Admin, err = AdminClient(cp)
	require.NoError(t, err)
	if opts.Swim {
		s.SwimAddr = testnet.FreeTCPUDPAddr(t)
	}
	return s
}

// Setup does what the agent's chart does before the agent starts:
// installs the CRDs, creates the watched namespaces, grants the agent's
// ServiceAccount its RBAC and writes its kubeconfig to s.Kubeconfig (and
// s.Config). Every step is idempotent: a caller may retry it whole.
func (s *Site) Setup(ctx context.Context) error {
	if err := s.CP.InstallCRDsFS(ctx, crds.Manifests); err != nil {
		return err
	}
	for _, ns := range s.Namespaces {
		if err := s.CP.EnsureNamespace(ctx, ns); err != nil {
			return err
		}
	}
	cfg, err := s.CP.AgentConfig(ctx, s.AgentNS, s.Namespaces)
	if err != nil {
		return err
	}
	s.Config = cfg
	return controlplane.WriteKubeconfig(cfg, s.Kubeconfig)
}

// Namespace is the site's own namespace: its gateways, Secrets, pods.
func (s *Site) Namespace() string { return s.Namespaces[0] }

// AdminClient is an admin client of cp that knows the Grid types; it can
// watch, as a benchmark watching the agent's writes does.
func AdminClient(cp *controlplane.ControlPlane) (client.WithWatch, error) {
	scheme, err := controller.Scheme()
	if err != nil {
		return nil, err
	}
	return client.NewWithWatch(cp.AdminConfig(), client.Options{Scheme: scheme})
}

// AgentOptions say how a suite runs the agent beyond its site.
type AgentOptions struct {
	// Timings are the agent's; zero keeps its defaults, as a pod runs it.
	Timings Timings
	// Loopback lets the agent's probes and polls dial loopback, where
	// every test's gateways, peers and providers listen: the agent denies
	// it unless a CIDR allows it.
	Loopback bool
	// Env is added to the test's environment.
	Env []string
	// Args are the agent's other flags.
	Args []string
	// Wrap is a command the agent runs under (prlimit) with its arguments
	// before the agent's.
	Wrap []string
}

// AgentArgs are the flags of the site's agent with its health port on
// health.
func (s *Site) AgentArgs(health string, opts AgentOptions) []string {
	args := []string{"--kubeconfig", s.Kubeconfig, "--namespaces", strings.Join(s.Namespaces, ","),
		"--leader-election-namespace", s.AgentNS, "--health-addr", health}
	if s.Name != "" {
		args = append(args, "--site-name", s.Name)
	}
	if s.SwimAddr != "" {
		args = append(args, "--swim-bind-addr", s.SwimAddr)
	}
	args = append(args, opts.Timings.Flags()...)
	if opts.Loopback {
		args = append(args, "--probe-allow-destinations", "127.0.0.0/8")
	}
	return append(args, opts.Args...)
}

// Agent is a site's gridsync-agent process.
type Agent struct {
	*testproc.Proc
	// Health is its health port's address (/readyz, /status, /metrics).
	Health string
}

// StartAgent starts the site's agent (the binary Main built) and waits
// for it to be ready. It is killed when the test ends.
func (s *Site) StartAgent(t testing.TB, opts AgentOptions) *Agent {
	t.Helper()
	a := &Agent{Health: testproc.FreeAddr(t)}
	path, args := Bin(testbin.Agent), s.AgentArgs(a.Health, opts)
	if len(opts.Wrap) > 0 {
		path, args = opts.Wrap[0], append(append(opts.Wrap[1:len(opts.Wrap):len(opts.Wrap)], path), args...)
	}
	a.Proc = testproc.Start(t, path, opts.Env, args...)
	testproc.WaitOK(t, "http://"+a.Health+"/readyz")
	return a
}
