package testnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	crds "github.com/gridsync/gridsync/charts/gridsync-agent/files/crds"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/mounts"
	"github.com/gridsync/gridsync/controller/praxisconfig"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testproc"
)

// The delegated gateway's names: the chart's release (its Deployment,
// fullnameOverride) and the GatewayRef.
const (
	DelegatedDeployment = "edge-gw"
	DelegatedGateway    = "edge"
)

// BootstrapConfig is the praxis.yaml a delegated gateway starts from,
// written by its owner before the chart is installed: a listener, no
// cluster.
const BootstrapConfig = "listeners:\n  - name: main\n    address: \"0.0.0.0:8080\"\n"

// Delegation is a gateway whose mounts are delegated, on the node: its
// bootstrap config, the praxis-gateway chart installed by Helm with
// mountReconciliation (its Role grants the agent get and patch on the
// Deployment), a GridNetwork naming it, and the agent's controller running
// in this process with exactly the agent chart's RBAC, which grants no
// Deployment access of its own.
type Delegation struct {
	Namespace, AgentNamespace string
	Network                   *v1alpha1.GridNetwork
	Release                   *Release
	// Values are the chart's values as installed.
	Values map[string]any
	Admin  client.Client

	patches atomic.Int64
	logs    testproc.Buffer
	stop    context.CancelFunc
	done    chan error
}

var (
	crdsOnce sync.Once
	crdsErr  error // the one install's, for every caller
)

// Delegate sets a delegation up in namespace ns with replicas gateway
// pods (values merged over the chart's delegated values), and waits until
// the bootstrap Deployment's pods are ready. The agent re-reads Secrets
// every resync.
func Delegate(ctx context.Context, cp *controlplane.ControlPlane, ns string, replicas int, resync time.Duration, values map[string]any) (*Delegation, error) {
	crdsOnce.Do(func() { crdsErr = cp.InstallCRDsFS(ctx, crds.Manifests) })
	if crdsErr != nil {
		return nil, crdsErr
	}
	scheme, err := controller.Scheme()
	if err != nil {
		return nil, err
	}
	d := &Delegation{Namespace: ns, AgentNamespace: ns + "-agent"}
	if d.Admin, err = client.New(cp.AdminConfig(), client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	for _, n := range []string{ns, d.AgentNamespace} {
		if err := cp.EnsureNamespace(ctx, n); err != nil {
			return nil, err
		}
	}
	saConfig, err := cp.AgentConfig(ctx, d.AgentNamespace, []string{ns})
	if err != nil {
		return nil, err
	}
	if err := d.Admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: praxisconfig.DefaultConfigMapName, Namespace: ns},
		Data: map[string]string{praxisconfig.DataKey: BootstrapConfig}}); err != nil {
		return nil, err
	}
	d.Network = &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: "delegated-" + ns}}
	d.Values = Merge(ImageValues("praxis-gateway"), map[string]any{
		"fullnameOverride": DelegatedDeployment,
		"replicaCount":     replicas,
		"praxisConfig":     map[string]any{"source": "operator"},
		"mountReconciliation": map[string]any{"enabled": true, "network": d.Network.Name, "gatewayRef": DelegatedGateway,
			"operator": map[string]any{"serviceAccount": controlplane.AgentServiceAccount, "namespace": d.AgentNamespace}},
		// Rollouts as fast as the pods: readiness is the listener.
		"health": map[string]any{"readiness": map[string]any{"tcpSocket": map[string]any{"port": "http"}, "initialDelaySeconds": 0, "periodSeconds": 1}},
	}, values)
	if d.Release, err = Install(ctx, cp, Chart("praxis-gateway"), DelegatedDeployment, ns, d.Values); err != nil {
		return nil, err
	}
	if err := d.WaitRolledOut(ctx, 3*time.Minute); err != nil {
		return nil, fmt.Errorf("the bootstrap Deployment: %w", err)
	}
	d.Network.Spec.ConsumerGateways = []v1alpha1.ConsumerGateway{{Name: DelegatedGateway, Namespace: ns, SiteName: "east",
		PraxisConfig: &v1alpha1.PraxisConfig{Generate: true,
			ClusterEndpoints:    []v1alpha1.ClusterEndpoint{{Cluster: "a", Address: "127.0.0.1:18080", Transport: &v1alpha1.EndpointTransport{Mode: "plaintext"}}},
			MountReconciliation: &v1alpha1.MountReconciliation{Enabled: true, DeploymentName: DelegatedDeployment}}}}
	if err := d.Admin.Create(ctx, d.Network); err != nil {
		return nil, err
	}
	return d, d.startAgent(saConfig, resync)
}

func (d *Delegation) startAgent(saConfig *rest.Config, resync time.Duration) error {
	cfg := rest.CopyConfig(saConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/deployments/") {
				d.patches.Add(1)
			}
			return rt.RoundTrip(req)
		})
	})
	mgr, err := controller.NewManager(cfg, controller.ManagerOptions{Options: controller.Options{
		Namespaces: []string{d.Namespace}, ProducerVersion: "test", ResyncPeriod: resync, EventNamespace: d.AgentNamespace,
		Logger: slog.New(slog.NewJSONHandler(&d.logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}, SeveralPerProcess: true})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.stop, d.done = cancel, make(chan error, 1)
	go func() { d.done <- mgr.Start(ctx) }()
	return nil
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Stop stops the agent and forgets the release's kubeconfig.
func (d *Delegation) Stop() error {
	var err error
	if d.stop != nil {
		d.stop()
		err = <-d.done
	}
	return errors.Join(err, d.Release.Close())
}

// Logs are the agent's log lines.
func (d *Delegation) Logs() string { return d.logs.String() }

// Patches counts the agent's PATCH requests to Deployments.
func (d *Delegation) Patches() int { return int(d.patches.Load()) }

// Deployment reads the gateway's Deployment.
func (d *Delegation) Deployment(ctx context.Context) (*appsv1.Deployment, error) {
	var dep appsv1.Deployment
	err := d.Admin.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: DelegatedDeployment}, &dep)
	return &dep, err
}

// Status is the gateway's mountReconciliationStatus entry (zero before
// the first).
func (d *Delegation) Status(ctx context.Context) (v1alpha1.MountReconciliationStatus, error) {
	var n v1alpha1.GridNetwork
	if err := d.Admin.Get(ctx, client.ObjectKeyFromObject(d.Network), &n); err != nil {
		return v1alpha1.MountReconciliationStatus{}, err
	}
	for _, s := range n.Status.MountReconciliationStatus {
		if s.GatewayName == DelegatedGateway {
			return s, nil
		}
	}
	return v1alpha1.MountReconciliationStatus{}, nil
}

// WaitStatus polls the status entry every 50 ms until ok holds.
func (d *Delegation) WaitStatus(ctx context.Context, timeout time.Duration, ok func(v1alpha1.MountReconciliationStatus) bool) (v1alpha1.MountReconciliationStatus, error) {
	deadline := time.Now().Add(timeout)
	for {
		st, err := d.Status(ctx)
		if err == nil && ok(st) {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, errors.Join(fmt.Errorf("mountReconciliationStatus after %s: %s/%s: %s", timeout, st.Phase, st.Reason, st.Message), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitReady waits for a Ready status of a template newer than generation,
// rolled out: not a Ready written before the agent's patch, and the status
// names the slot and config the template carries. It returns the status
// and the Deployment.
func (d *Delegation) WaitReady(ctx context.Context, generation int64, timeout time.Duration) (v1alpha1.MountReconciliationStatus, *appsv1.Deployment, error) {
	var dep *appsv1.Deployment
	st, err := d.WaitStatus(ctx, timeout, func(s v1alpha1.MountReconciliationStatus) bool {
		var err error
		dep, err = d.Deployment(ctx)
		return err == nil && s.Phase == mounts.PhaseReady && dep.Generation > generation && RolledOut(dep) &&
			s.ConfigMapName == ConfigSlot(dep) && s.ConfigRevision == dep.Spec.Template.Annotations[mounts.AnnotationConfigRevision]
	})
	return st, dep, err
}

// WaitRolledOut waits until the Deployment is RolledOut.
func (d *Delegation) WaitRolledOut(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		dep, err := d.Deployment(ctx)
		if err == nil && RolledOut(dep) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("not rolled out within %s: %+v", timeout, dep.Status), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// RolledOut: the controller saw the current template, every wanted
// replica runs it and is available, none older remains.
func RolledOut(d *appsv1.Deployment) bool {
	if d.Spec.Replicas == nil {
		return false
	}
	st, want := d.Status, *d.Spec.Replicas
	return st.ObservedGeneration == d.Generation && st.UpdatedReplicas == want && st.Replicas == want && st.AvailableReplicas == want &&
		(st.TerminatingReplicas == nil || *st.TerminatingReplicas == 0)
}

// ConfigSlot is the ConfigMap the chart's config volume projects.
func ConfigSlot(d *appsv1.Deployment) string {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "config" && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}

// Provider creates a local provider of cluster "a", without a credential.
func (d *Delegation) Provider(ctx context.Context) (*v1alpha1.InferenceProvider, error) {
	p := &v1alpha1.InferenceProvider{ObjectMeta: metav1.ObjectMeta{Name: "provider-" + d.Namespace},
		Spec: v1alpha1.InferenceProviderSpec{GridNetworkRef: d.Network.Name, ProviderKind: "vllm", BackendKind: "openai_compatible",
			Endpoint: "https://provider-a.example", ClusterName: "a", Models: []v1alpha1.Model{{Name: "model-a"}}}}
	return p, d.Admin.Create(ctx, p)
}

// SetCredential makes the provider's credential the bearer token in the
// key token of the Secret (in the gateway's namespace, as delegated mounts
// require); "" removes it. A conflict with the agent's status writes is
// tried again.
func (d *Delegation) SetCredential(ctx context.Context, p *v1alpha1.InferenceProvider, secret string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := d.Admin.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		p.Spec.Auth = nil
		if secret != "" {
			p.Spec.Auth = &v1alpha1.ProviderAuth{Strategy: "bearer_token",
				SecretRef: &v1alpha1.SecretKeyReference{Name: secret, Namespace: d.Namespace, Key: "token"}}
		}
		return d.Admin.Update(ctx, p)
	})
}
