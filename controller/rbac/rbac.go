// Package rbac is the least privilege the controller needs, in one place:
// the agent chart grants exactly these rules and the integration tests run
// the agent with nothing more.
package rbac

import (
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/gridsync/gridsync/controller/api/v1alpha1"
)

// ClusterRules are granted cluster-wide: the Grid resources are
// cluster-scoped. Read them, write their status, nothing else.
func ClusterRules() []rbacv1.PolicyRule {
	group := v1alpha1.GroupVersion.Group
	return []rbacv1.PolicyRule{
		{APIGroups: []string{group}, Resources: []string{"gridnetworks", "inferenceproviders"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{group}, Resources: []string{"gridnetworks/status", "inferenceproviders/status"}, Verbs: []string{"get", "update", "patch"}},
	}
}

// NamespaceRules are granted in each namespace where gateways run (or
// cluster-wide when the agent serves every namespace): publish overlay
// ConfigMaps, and read credential Secrets to verify them (the cache keeps
// only their shape).
func NamespaceRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}},
	}
}

// LeaderElectionRules are granted in the agent's own namespace: the Lease
// that elects one active replica, and the events that record the change
// of leader.
func LeaderElectionRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
}
