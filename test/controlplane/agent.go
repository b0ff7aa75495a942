package controlplane

import (
	"context"

	"k8s.io/client-go/rest"

	"github.com/gridsync/gridsync/controller/rbac"
)

// AgentServiceAccount is the ServiceAccount AgentConfig grants to.
const AgentServiceAccount = "gridsync-agent"

// AgentConfig gives the ServiceAccount agentNamespace/gridsync-agent
// exactly the agent's least privilege (controller/rbac, as its chart
// grants it): the cluster rules, the namespace rules in each of
// namespaces, the leader election, SWIM Service and record key Secret
// rules in its own namespace. It returns a
// client configuration with the ServiceAccount's token. The cluster role
// is named after agentNamespace, so agents in different namespaces do not
// share it.
func (cp *ControlPlane) AgentConfig(ctx context.Context, agentNamespace string, namespaces []string) (*rest.Config, error) {
	const sa = AgentServiceAccount
	if err := cp.Grant(ctx, agentNamespace, sa, "gridsync-agent-"+agentNamespace, "", rbac.ClusterRules()); err != nil {
		return nil, err
	}
	for _, ns := range namespaces {
		if err := cp.Grant(ctx, agentNamespace, sa, "gridsync-agent", ns, rbac.NamespaceRules(false)); err != nil {
			return nil, err
		}
	}
	if err := cp.Grant(ctx, agentNamespace, sa, "gridsync-agent-leader-election", agentNamespace, rbac.LeaderElectionRules()); err != nil {
		return nil, err
	}
	if err := cp.Grant(ctx, agentNamespace, sa, "gridsync-agent-swim-service", agentNamespace, rbac.SwimServiceRules()); err != nil {
		return nil, err
	}
	if err := cp.Grant(ctx, agentNamespace, sa, "gridsync-agent-record-key", agentNamespace, rbac.RecordKeySecretRules(rbac.DefaultRecordKeySecret)); err != nil {
		return nil, err
	}
	return cp.ServiceAccountConfig(ctx, agentNamespace, sa)
}

// AgentTrustSecrets gives agentNamespace/gridsync-agent what the chart's
// trust.secrets gives it in namespace: get, create and patch on the named
// grid CA and site certificate Secrets only.
func (cp *ControlPlane) AgentTrustSecrets(ctx context.Context, agentNamespace, namespace string, names ...string) error {
	return cp.Grant(ctx, agentNamespace, AgentServiceAccount, "gridsync-agent-trust", namespace, rbac.TrustSecretRules(names...))
}
