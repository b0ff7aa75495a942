// Package certmanager runs trust/README.md's cert-manager recipe for real:
// the pinned cert-manager's controllers (`make tools` builds them into
// .tools/bin/cert-manager-controller, with its CRDs beside them) issue and
// renew a site's certificate at one site, whose agent takes it as provided,
// and another site, on its own control plane, trusts it.
package certmanager

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/gossip/swimkeys"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testproc"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Two clusters: site A, whose agent holds the grid CA and issues its own
// certificate, and site B, whose certificate cert-manager issues.
var clusters [2]*controlplane.ControlPlane

func TestMain(m *testing.M) {
	framework.Main(m, framework.ControlPlanes(&clusters[0], &clusters[1]), framework.Binaries(testbin.Agent))
}

// The cert-manager resources the test writes and reads.
var (
	certificates = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}
	issuers      = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "issuers"}
)

// certManagerControllers are the controllers a CA Issuer and its
// Certificates need: the Issuer's readiness, the Certificate's life cycle
// (trigger, key, request, issuing, readiness, revisions), and the
// CertificateRequest's approval and signing by the CA. No webhook runs:
// the CRDs' schemas are the only validation, which the recipe passes.
var certManagerControllers = []string{
	"issuers",
	"certificaterequests-approver",
	"certificaterequests-issuer-ca",
	"certificates-trigger",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-issuing",
	"certificates-readiness",
	"certificates-revision-manager",
}

// tools are cert-manager's controller and the CRD folder `make tools`
// built from the pinned module. Their absence fails the test: a run
// without them must not pass for one that checked the recipe.
func tools(t *testing.T) (controllerBin, crdDir string) {
	t.Helper()
	dir, err := controlplane.BinDir()
	require.NoError(t, err)
	controllerBin = filepath.Join(dir, "cert-manager-controller")
	crdDir = filepath.Join(dir, "cert-manager-crds")
	_, err = os.Stat(controllerBin)
	require.NoError(t, err, "the pinned cert-manager controller is not built: run `make tools` (or set %s)", controlplane.BinDirEnv)
	crds, _ := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	require.NotEmpty(t, crds, "the pinned cert-manager's CRDs are not in %s: run `make tools`", crdDir)
	return controllerBin, crdDir
}

// startCertManager installs cert-manager's CRDs on cp and runs its
// controllers as a process, limited to namespace, with cluster-admin's
// credentials (the chart's RBAC is cert-manager's business, not the
// grid's). It is stopped when the test ends.
func startCertManager(t *testing.T, cp *controlplane.ControlPlane, namespace string) *testproc.Proc {
	t.Helper()
	bin, crdDir := tools(t)
	crds, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	require.NoError(t, err)
	require.NoError(t, cp.InstallCRDs(context.Background(), crds...))
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, controlplane.WriteKubeconfig(cp.AdminConfig(), kubeconfig))
	return testproc.Start(t, bin, nil, "--kubeconfig", kubeconfig, "--namespace", namespace, "--leader-elect=false",
		"--controllers", strings.Join(certManagerControllers, ","), "-v", "2")
}

// recipe is trust/README.md's cert-manager recipe, its YAML block read
// from the README itself so that the test holds the documented resources
// and not a copy that could drift: the Issuer and the Certificate, in
// namespace instead of the README's grid-system.
func recipe(t *testing.T, namespace string) (issuer, certificate *unstructured.Unstructured) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "trust", "README.md"))
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(doc), "**A certificate from cert-manager**")
	require.True(t, ok, "trust/README.md has no cert-manager recipe")
	_, after, ok = strings.Cut(after, "```yaml\n")
	require.True(t, ok, "trust/README.md's cert-manager recipe has no YAML block")
	block, _, ok := strings.Cut(after, "```")
	require.True(t, ok)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(block)), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); err != nil {
			break
		}
		if obj.Object == nil {
			continue
		}
		obj.SetNamespace(namespace)
		switch obj.GetKind() {
		case "Issuer":
			issuer = &obj
		case "Certificate":
			certificate = &obj
		}
	}
	require.NotNil(t, issuer, "trust/README.md's cert-manager recipe has no Issuer")
	require.NotNil(t, certificate, "trust/README.md's cert-manager recipe has no Certificate")
	return issuer, certificate
}

// site is one cluster's corner: framework.Site with the helpers this test
// needs.
type site struct {
	*framework.Site
	t       *testing.T
	gateway string
}

func newSite(t *testing.T, cp *controlplane.ControlPlane, name string) *site {
	t.Helper()
	return &site{Site: framework.NewSite(t, cp, framework.SiteOptions{Prefix: "cm", Name: name, Swim: true}), t: t,
		gateway: testproc.FreeAddr(t)}
}

func (s *site) start() *framework.Agent {
	s.t.Helper()
	return s.StartAgent(s.t, framework.AgentOptions{Timings: framework.Fast, Loopback: true, Args: []string{"--gateway-address", s.gateway}})
}

func (s *site) secret(name string, typ corev1.SecretType, data map[string][]byte) {
	s.t.Helper()
	require.NoError(s.t, s.Admin.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace()}, Type: typ, Data: data}))
}

func (s *site) secretData(name string) map[string][]byte {
	var sec corev1.Secret
	if err := s.Admin.Get(context.Background(), types.NamespacedName{Namespace: s.Namespace(), Name: name}, &sec); err != nil {
		return nil
	}
	return sec.Data
}

// network creates the site's GridNetwork "grid" in SPIFFE mode (no pins:
// a renewed certificate needs no operator) with its SWIM key Secret and
// the given TLS settings; it is removed, finalizer and all, when the test
// ends.
func (s *site) network(tls *v1alpha1.GridTLS, seeds ...string) {
	s.t.Helper()
	tls.SwimKeySecretRef = &v1alpha1.NamespacedKeyRef{Name: "swim-key", Namespace: s.Namespace()}
	n := &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: "grid", Labels: map[string]string{controller.AutoDiscoverSitesLabel: "true"}},
		Spec: v1alpha1.GridNetworkSpec{
			Seeds:            seeds,
			ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: s.Namespace(), SiteName: s.Name}},
			TLS:              tls,
			PeerTrust:        &v1alpha1.PeerTrust{Mode: "spiffe"},
		},
	}
	require.NoError(s.t, s.Admin.Create(context.Background(), n))
	s.t.Cleanup(func() { s.remove(n) })
}

func (s *site) remove(obj client.Object) {
	ctx := context.Background()
	_ = s.Admin.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	_ = s.Admin.Delete(ctx, obj)
}

func (s *site) provider(name, model string) {
	s.t.Helper()
	p := &v1alpha1.InferenceProvider{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.InferenceProviderSpec{GridNetworkRef: "grid", ProviderKind: "vllm", BackendKind: "openai_compatible",
			Endpoint: "https://" + name + ".invalid", ClusterName: s.Name, Models: []v1alpha1.Model{{Name: model}}},
	}
	require.NoError(s.t, s.Admin.Create(context.Background(), p))
	s.t.Cleanup(func() { s.remove(p) })
}

// routes reports whether the site's overlay for gateway edge offers
// model from site.
func (s *site) routes(site, model string) bool {
	var cm corev1.ConfigMap
	key := types.NamespacedName{Namespace: s.Namespace(), Name: envelope.ConfigMapName("grid", "edge")}
	if err := s.Admin.Get(context.Background(), key, &cm); err != nil {
		return false
	}
	var doc struct {
		Overlay envelope.Overlay `json:"overlay"`
	}
	if json.Unmarshal([]byte(cm.Data[envelope.DataKeyEnvelope]), &doc) != nil {
		return false
	}
	for _, c := range doc.Overlay.Candidates {
		if c.Site == site && c.Name == model {
			return true
		}
	}
	return false
}

func (s *site) gridSite(name string) *v1alpha1.GridSite {
	var gs v1alpha1.GridSite
	if err := s.Admin.Get(context.Background(), types.NamespacedName{Name: name}, &gs); err != nil {
		return nil
	}
	return &gs
}

// identity is the network's SiteIdentity condition, reason and message.
func (s *site) identity() string {
	var n v1alpha1.GridNetwork
	if err := s.Admin.Get(context.Background(), types.NamespacedName{Name: "grid"}, &n); err != nil {
		return err.Error()
	}
	for _, c := range n.Status.Conditions {
		if c.Type == controller.ConditionSiteIdentity {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

// probes are an agent's grid_site_probes_total by outcome: what it
// verified (TlsVerified) and what it refused (the trust failures, not the
// timeouts and refused connections a loaded machine can cause).
func probes(t *testing.T, a *framework.Agent) (verified, refused float64) {
	_, body := testproc.Get(t, "http://"+a.Health+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, "grid_site_probes_total{outcome=")
		if !ok {
			continue
		}
		quoted, value, _ := strings.Cut(rest, "} ")
		outcome, err := strconv.Unquote(quoted)
		if err != nil {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch outcome {
		case sitetrust.ReasonTLSVerified:
			verified += v
		case sitetrust.ReasonConnectTimeout, sitetrust.ReasonConnectionFailed, sitetrust.ReasonHandshakeTimeout:
		default:
			refused += v
		}
	}
	return verified, refused
}

func newKey(t *testing.T) []byte {
	k := make([]byte, swimkeys.Size)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return k
}

// condition is a cert-manager resource's status condition of type typ.
func condition(obj *unstructured.Unstructured, typ string) (status, reason, message string) {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			return s, r, msg
		}
	}
	return "", "", ""
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
