package controller_test

import (
	"fmt"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
)

type candidate struct {
	Kind       string               `json:"kind"`
	Name       string               `json:"name"`
	Site       string               `json:"site"`
	Cluster    string               `json:"cluster"`
	Fresh      bool                 `json:"fresh"`
	Credential *envelope.Credential `json:"credential"`
	StableID   string               `json:"stable_id"`
	Rank       *int64               `json:"rank"`
	Admission  string               `json:"admission_state"`
	Score      *float64             `json:"score"`
	Weight     *int64               `json:"selection_weight"`
}

func candidatesOf(t *testing.T, cm *corev1.ConfigMap) []candidate {
	t.Helper()
	var doc struct {
		Overlay struct {
			Candidates []candidate `json:"candidates"`
		} `json:"overlay"`
	}
	require.NoError(t, json.Unmarshal([]byte(cm.Data[envelope.DataKeyEnvelope]), &doc))
	return doc.Overlay.Candidates
}

func TestPublishesAnOverlayPerGatewayWithTheContractsNamesAndKeys(t *testing.T) {
	e := newEnv(t)
	e.create(e.secret("east-token", map[string][]byte{"token": []byte("east-s3cret")}))
	east := e.gateway("edge-east", "east")
	west := e.gateway("edge-west", "")
	network := e.network(east, west)
	e.create(network)

	withToken := e.provider("east-provider", network.Name, "model-b", "model-a")
	withToken.Spec.Auth = e.bearer("east-token", "token")
	withToken.Spec.ClusterName = "sim-east"
	e.create(withToken)
	westOnly := e.provider("west-provider", network.Name, "model-a")
	westOnly.Spec.AccessPolicy = &v1alpha1.AccessPolicy{SiteSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.SiteLabel: network.Name}}}
	e.create(westOnly)
	e.create(e.provider("other-network", "some-other-network", "model-z"))
	e.startAgent()

	cm, res := e.overlayOf(network, east, func(r envelope.Result) bool { return r.CandidateCount == 2 })
	assert.Equal(t, envelope.ConfigMapName(network.Name, east.Name), cm.Name)
	assert.Equal(t, map[string]string{
		envelope.LabelManagedBy: "gridsync-agent",
		envelope.LabelGateway:   east.Name,
		envelope.LabelNetwork:   network.Name,
	}, cm.Labels)
	assert.Equal(t, map[string]string{
		envelope.AnnotationSchemaVersion: envelope.SchemaVersion,
		envelope.AnnotationRevision:      res.Revision,
		envelope.AnnotationContentDigest: res.Revision,
	}, cm.Annotations)
	require.Len(t, cm.Data, 2)
	bareDigest, err := envelope.Digest([]byte(cm.Data[envelope.DataKeyBare]))
	require.NoError(t, err)
	assert.Equal(t, res.Revision, bareDigest, "the bare copy holds the same routing state")
	assert.Equal(t, "gridsync-agent", res.Provenance.Producer)
	assert.Equal(t, network.Name, res.Provenance.SourceName)

	got := candidatesOf(t, cm)
	cred := &envelope.Credential{Strategy: "bearer_token", SecretRef: envelope.SecretRef{Name: "east-token", Namespace: e.credNS, Key: "token"}}
	for i, want := range []candidate{
		{Kind: "inference_model", Name: "model-a", Site: withToken.Name, Cluster: "sim-east", Fresh: true, Credential: cred, Admission: "new_and_existing"},
		{Kind: "inference_model", Name: "model-b", Site: withToken.Name, Cluster: "sim-east", Fresh: true, Credential: cred, Admission: "new_and_existing"},
	} {
		want.StableID = envelope.StableID(want.Kind, want.Name, want.Site, want.Cluster)
		rank := int64(i)
		want.Rank = &rank
		assert.Equal(t, want, got[i])
	}

	// The west gateway's site defaults to the network's name, which the
	// west-only provider admits.
	cmWest, _ := e.overlayOf(network, west, func(r envelope.Result) bool { return r.CandidateCount == 3 })
	sites := map[string]int{}
	for _, c := range candidatesOf(t, cmWest) {
		sites[c.Site]++
	}
	assert.Equal(t, map[string]int{withToken.Name: 2, westOnly.Name: 1}, sites)

	// Status: one entry per gateway, matching the ConfigMaps.
	var gotNet v1alpha1.GridNetwork
	e.eventually("network status", func() (bool, string) {
		require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &gotNet))
		return gotNet.Status.DistributedCount == 2, fmt.Sprint("distributed ", gotNet.Status.DistributedCount)
	})
	require.Len(t, gotNet.Status.OverlayStatus, 2)
	entry := gotNet.Status.OverlayStatus[0]
	if entry.GatewayName != east.Name {
		entry = gotNet.Status.OverlayStatus[1]
	}
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(cm), cm))
	assert.Equal(t, v1alpha1.OverlayDistributed, entry.Phase)
	assert.Equal(t, cm.Name, entry.ConfigMapName)
	assert.Equal(t, res.Revision, entry.RenderedRevision)
	assert.Equal(t, res.Revision, entry.ContentDigest)
	assert.Equal(t, envelope.SchemaVersion, entry.SchemaVersion)
	assert.Equal(t, cm.ResourceVersion, entry.ConfigMapResourceVersion)
	assert.Equal(t, int32(2), entry.CandidateCount)
	assert.NotNil(t, entry.RenderedAt)
	assert.Equal(t, gotNet.Generation, entry.ObservedGeneration)
	assert.Equal(t, gotNet.Generation, gotNet.Status.ObservedGeneration)
	assert.Equal(t, metav1.ConditionTrue, condition(&gotNet, "Ready").Status)

	e.providerPhase(withToken, v1alpha1.ProviderAvailable, "Ready")
}

// Empty matchLabels = all sites in the grid: a provider whose access
// policy selects with empty matchLabels (applied as the reference writes
// it) is in the overlay of every site's gateway, where one that names a
// site is in that site's alone.
func TestAnEmptyMatchLabelsReachesEverySitesOverlay(t *testing.T) {
	e := newEnv(t)
	east, west := e.gateway("edge-east", "east"), e.gateway("edge-west", "west")
	network := e.network(east, west)
	e.create(network)
	everywhere := gridObject("InferenceProvider", "everywhere-"+e.id, map[string]any{
		"gridNetworkRef": network.Name, "providerKind": "vllm", "backendKind": "openai_compatible",
		"endpoint": "https://everywhere.example", "models": []any{map[string]any{"name": "model-all"}},
		"accessPolicy": map[string]any{"siteSelector": map[string]any{"matchLabels": map[string]any{}}},
	})
	everywhere.SetLabels(map[string]string{"test": e.id})
	require.NoError(t, e.admin.Create(e.ctx, everywhere, client.FieldValidation("Strict")))
	westOnly := e.provider("west-only", network.Name, "model-west")
	westOnly.Spec.AccessPolicy = &v1alpha1.AccessPolicy{SiteSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.SiteLabel: "west"}}}
	e.create(westOnly)
	e.startAgent()

	names := func(cm *corev1.ConfigMap) []string {
		var out []string
		for _, c := range candidatesOf(t, cm) {
			out = append(out, c.Name)
		}
		return out
	}
	cm, _ := e.overlayOf(network, east, func(r envelope.Result) bool { return r.CandidateCount == 1 })
	assert.Equal(t, []string{"model-all"}, names(cm))
	cm, _ = e.overlayOf(network, west, func(r envelope.Result) bool { return r.CandidateCount == 2 })
	assert.ElementsMatch(t, []string{"model-all", "model-west"}, names(cm))
}
