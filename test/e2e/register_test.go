package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	crds "github.com/gridsync/gridsync/charts/gridsync-agent/files/crds"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/trust/enrol"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// gridCA is the issuer's grid CA, for one network.
type gridCA struct{ ca *sitetrust.CA }

func (g gridCA) Authority(context.Context, string) (*sitetrust.CA, []string, error) {
	return g.ca, nil, nil
}

// The issuer's operator reads the register and releases a name with the
// agent's commands, against the API server that holds the issuer's
// token Secret, with no right beyond the issuer agent's own (get and
// patch on that Secret, by name): a second token for an enrolled name
// is refused under another key until the name is released, and enrols
// it once it is.
func TestTheIssuersOperatorListsAndReleasesRegisteredNames(t *testing.T) {
	ctx := context.Background()
	ns := fmt.Sprintf("issuer-%d", time.Now().UnixNano()%1000000)
	require.NoError(t, cp.EnsureNamespace(ctx, ns))
	dir := t.TempDir()
	adminKube := filepath.Join(dir, "admin")
	require.NoError(t, controlplane.WriteKubeconfig(cp.AdminConfig(), adminKube))
	require.NoError(t, cp.Grant(ctx, ns, "issuer", "issuer-enrollment-tokens", ns, rbac.EnrollmentTokenRules(enrol.DefaultTokenSecret)))
	issuerCfg, err := cp.ServiceAccountConfig(ctx, ns, "issuer")
	require.NoError(t, err)
	issuerKube := filepath.Join(dir, "issuer")
	require.NoError(t, controlplane.WriteKubeconfig(issuerCfg, issuerKube))

	run := func(kubeconfig string, args ...string) (stdout, stderr string, code int) {
		cmd := exec.CommandContext(ctx, framework.Bin(testbin.Agent), append(args, "--kubeconfig", kubeconfig, "--namespace", ns)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return out.String(), errOut.String(), code
	}
	newToken := func(site string) string {
		out, errOut, code := run(adminKube, "enroll-token", "--network", "grid", "--site", site)
		require.Zero(t, code, errOut)
		return strings.TrimSpace(out)
	}
	_, errOut, code := run(issuerKube, "registered-sites", "--network", "grid")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "the token Secret "+ns+"/"+enrol.DefaultTokenSecret+" does not exist")

	caPEM, caKey, err := sitetrust.NewCA(time.Now(), time.Hour)
	require.NoError(t, err)
	ca, err := sitetrust.ParseCA(caPEM, caKey)
	require.NoError(t, err)
	serving, servingKey, err := ca.Issue("hub", time.Now(), time.Hour)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(serving, servingKey)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	issuerAPI, err := client.New(issuerCfg, client.Options{})
	require.NoError(t, err)
	srv, err := enrol.NewServer(gridCA{ca: ca}, &enrol.Tokens{API: issuerAPI, Namespace: ns}, time.Hour, slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: roots, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}}
	go func() { _ = hs.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = hs.Close() })
	enrolWith := func(token string) (*x509.Certificate, error) {
		key, csr, err := enrol.NewKey()
		require.NoError(t, err)
		chain, err := (&enrol.Client{}).Request(ctx, enrol.Issuer{Address: ln.Addr().String(), Site: "hub"}, roots,
			enrol.Request{Network: "grid", Site: "site-b", Token: token, CSR: string(csr)}, nil, key)
		if err != nil {
			return nil, err
		}
		certs, err := sitetrust.ParseCertificates(chain)
		require.NoError(t, err)
		return certs[0], nil
	}
	keyOf := func(c *x509.Certificate) string { return sitetrust.Fingerprint(c.RawSubjectPublicKeyInfo)[:16] }

	first := newToken("site-b")
	time.Sleep(300 * time.Millisecond) // the issuer re-reads its tokens at most every quarter second
	enrolled, err := enrolWith(first)
	require.NoError(t, err)

	// A second token for site-b: the operator is told the name is
	// registered, and an enrolment under another key is refused.
	out, errOut, code := run(adminKube, "enroll-token", "--network", "grid", "--site", "site-b")
	require.Zero(t, code, errOut)
	second := strings.TrimSpace(out)
	assert.Contains(t, errOut, "site site-b is registered under key sha256:"+keyOf(enrolled))
	assert.Contains(t, errOut, "(token id "+enrol.TokenID(second)+")")
	time.Sleep(300 * time.Millisecond)
	_, err = enrolWith(second)
	var refused *enrol.RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, enrol.RefusedNameRegistered, refused.Reason)

	out, errOut, code = run(issuerKube, "registered-sites", "--network", "grid")
	require.Zero(t, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	assert.Equal(t, []string{"site-b", keyOf(enrolled) + "…", enrolled.SerialNumber.Text(16)}, strings.Fields(lines[1])[:3])
	assert.Contains(t, lines[1], enrol.TokenID(first))
	assert.Contains(t, lines[1], enrolled.NotAfter.UTC().Format(time.RFC3339))
	assert.NotContains(t, out+errOut, first, "no token is printed")

	assert.Equal(t, "unknown", strings.Fields(lines[1])[len(strings.Fields(lines[1]))-1], "the issuer's credentials do not read the network")
	assert.Contains(t, errOut, "the EVICTED column is unknown")
	t.Logf("registered-sites:\n%s", out)

	// The operator's own credentials read the network too: the site its
	// spec evicts is marked.
	require.NoError(t, cp.InstallCRDsFS(ctx, crds.Manifests))
	scheme, err := controller.Scheme()
	require.NoError(t, err)
	admin, err := client.New(cp.AdminConfig(), client.Options{Scheme: scheme})
	require.NoError(t, err)
	network := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: "grid"}, Spec: v1alpha1.GridNetworkSpec{TLS: &v1alpha1.GridTLS{
		CASecretRef:     &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: ns},
		SiteCertificate: &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateIssuer, EvictedSites: []string{"site-b"}}}}}
	require.NoError(t, admin.Create(ctx, network))
	t.Cleanup(func() { _ = admin.Delete(context.Background(), network) })
	out, errOut, code = run(adminKube, "registered-sites", "--network", "grid")
	require.Zero(t, code, errOut)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	assert.Equal(t, "yes", strings.Fields(lines[1])[len(strings.Fields(lines[1]))-1], "site-b is evicted")
	out, errOut, code = run(issuerKube, "release-name", "--network", "grid", "--site", "site-b")
	require.Zero(t, code, errOut)
	t.Logf("release-name:\n%s", out)
	assert.Contains(t, out, "released site site-b of network grid: key sha256:"+keyOf(enrolled)+"…, serial "+enrolled.SerialNumber.Text(16))
	assert.Contains(t, out, "token "+enrol.TokenID(second)+" for site-b, not yet spent, enrols it from now on")
	assert.NotContains(t, out+errOut, second, "no token is printed")
	_, errOut, code = run(issuerKube, "release-name", "--network", "grid", "--site", "site-b")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "not registered")

	// Released: the token kept by the refusal enrols the name under a
	// new key, and the register says so.
	again, err := enrolWith(second)
	require.NoError(t, err)
	out, errOut, code = run(issuerKube, "registered-sites", "--network", "grid")
	require.Zero(t, code, errOut)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	assert.Equal(t, []string{"site-b", keyOf(again) + "…", again.SerialNumber.Text(16)}, strings.Fields(lines[1])[:3])
	assert.Contains(t, lines[1], enrol.TokenID(second))
}
