package multisite

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/trust/enrol"
)

// issuerGrid is a grid of one issuer and sites that enrol with it, each
// on its own cluster, in network "grid" (SPIFFE mode): site-a generates
// the grid CA and serves enrolment on its signals listener; the others
// hold the CA's certificate only (a ConfigMap) and enrol with a one-time
// token made by `gridsync-agent enroll-token`, carried out of band. Each
// site has one provider, prov-<x> serving model-<x>, and a gateway that
// presents its site certificate as it changes.
type issuerGrid struct {
	t        *testing.T
	ctx      context.Context
	sites    []*site
	agents   []*agent
	gateways map[string]*testgateway.Gateway
	// caData is the issuer's grid CA Secret (its key included).
	caData map[string][]byte
	// issuer is the issuer's signals listener, 127.0.0.1:port, and
	// issuerFiles its identity as the kubelet would project it.
	issuer      string
	issuerFiles *testpki.Projection
	// adminKube is a kubeconfig of the issuer's cluster, for the
	// operator's commands.
	adminKube string
	// tokens are the tokens the enrolled sites used.
	tokens map[string]string
	// flags start every agent; issuerFlags, the issuer's listener.
	flags, issuerFlags []string
}

// newIssuerGrid starts the issuer and the enrolled sites on the first
// len(names) clusters, and waits until every enrolled site holds its
// certificate.
func newIssuerGrid(t *testing.T, ctx context.Context, key []byte, names []string, flags ...string) *issuerGrid {
	t.Helper()
	g := &issuerGrid{t: t, ctx: ctx, gateways: map[string]*testgateway.Gateway{}, tokens: map[string]string{}, flags: flags}
	for i, name := range names {
		s := newSite(t, clusters[i], name)
		s.secret("swim-key", map[string][]byte{"key": key})
		require.NoError(t, s.CP.AgentTrustSecrets(ctx, s.AgentNS, s.Namespace(), "grid-ca", "site-cert"))
		g.sites = append(g.sites, s)
	}
	a := g.sites[0]
	g.issuer = "127.0.0.1:" + freePort(t)
	identityA := testpki.NewProjection(t)
	g.issuerFiles = identityA
	require.NoError(t, a.CP.Grant(ctx, a.AgentNS, controlplane.AgentServiceAccount, "gridsync-agent-enrollment", a.AgentNS, rbac.EnrollmentTokenRules(enrol.DefaultTokenSecret)))
	a.identityNetwork("grid", &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateIssuer})
	a.provider("prov-a", "grid", "model-a")
	g.issuerFlags = []string{"--signals-addr", g.issuer,
		"--signals-cert", identityA.Path("tls.crt"), "--signals-key", identityA.Path("tls.key"), "--signals-ca", identityA.Path("ca.crt")}
	g.agents = append(g.agents, a.start(nil, append(slices.Clone(flags), g.issuerFlags...)...))
	g.caData = a.waitSecret("grid-ca", func(d map[string][]byte) bool { return len(d["tls.key"]) > 0 })
	for _, s := range g.sites {
		gw, err := testgateway.Start(s.gateway)
		require.NoError(t, err)
		t.Cleanup(gw.Close)
		g.gateways[s.Name] = gw
	}
	go a.project(ctx, identityA, g.gateways[a.Name])

	g.adminKube = filepath.Join(t.TempDir(), "admin-kubeconfig")
	require.NoError(t, controlplane.WriteKubeconfig(a.CP.AdminConfig(), g.adminKube))
	for _, s := range g.sites[1:] {
		token := g.newToken(s.Name, "10m")
		g.tokens[s.Name] = token
		require.NoError(t, s.Admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "grid-ca", Namespace: s.Namespace()},
			Data: map[string]string{"ca.crt": string(g.caData["ca.crt"])}}))
		s.secret("enrol-token", map[string][]byte{"token": []byte(token)})
		s.identityNetwork("grid", &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateEnrolled,
			Issuer:                   &v1alpha1.EnrollmentIssuer{Address: g.issuer, Site: a.Name},
			EnrollmentTokenSecretRef: &v1alpha1.NamespacedKeyRef{Name: "enrol-token", Namespace: s.Namespace()}}, a.SwimAddr)
		short := strings.TrimPrefix(s.Name, "site-")
		s.provider("prov-"+short, "grid", "model-"+short)
		g.agents = append(g.agents, s.start(nil, flags...))
		go s.project(ctx, nil, g.gateways[s.Name])
	}
	for _, s := range g.sites[1:] {
		s.waitSecret("site-cert", func(d map[string][]byte) bool { return len(d["tls.key"]) > 0 })
		framework.Eventually(t, 30*time.Second, s.Name+" enrolled", func() (bool, string) {
			r := s.identityReason("grid")
			return strings.Contains(r, "by issuer site-a") || strings.Contains(r, "from issuer site-a"), r
		})
	}
	return g
}

// newToken is a token for site from the issuer's operator.
func (g *issuerGrid) newToken(site, ttl string) string {
	g.t.Helper()
	out, stderr := g.operator("enroll-token", "--namespace", g.sites[0].AgentNS, "--network", "grid", "--site", site, "--ttl", ttl)
	require.Contains(g.t, stderr, "usable once until")
	token := strings.TrimSpace(out)
	require.True(g.t, strings.HasPrefix(token, "gst_"), token)
	// The issuer re-reads its tokens at most every quarter second.
	time.Sleep(300 * time.Millisecond)
	return token
}

// operator runs a gridsync-agent command against the issuer's cluster,
// as its operator does, and returns its output; it must succeed.
func (g *issuerGrid) operator(args ...string) (stdout, stderr string) {
	g.t.Helper()
	stdout, stderr, err := g.tryOperator(args...)
	require.NoError(g.t, err, stderr)
	return stdout, stderr
}

// tryOperator is operator for a command that may be refused.
func (g *issuerGrid) tryOperator(args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(g.ctx, framework.Bin(testbin.Agent), append(args[:1:1], append([]string{"--kubeconfig", g.adminKube}, args[1:]...)...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// formed waits until every site is Active at every other.
func (g *issuerGrid) formed() {
	g.t.Helper()
	n := int32(len(g.sites) - 1)
	for _, s := range g.sites {
		s.networkStatus("grid", 60*time.Second, counts(v1alpha1.NetworkActive, n, n))
		for _, other := range g.sites {
			if other != s {
				s.gridSite("grid-"+other.Name, "Active", func(gs *v1alpha1.GridSite) bool { return gs.Status.Phase == "Active" })
			}
		}
	}
}
