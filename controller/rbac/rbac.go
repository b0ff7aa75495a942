// Package rbac is the least privilege the controller needs, in one place:
// the agent chart grants exactly these rules and the integration tests run
// the agent with nothing more. The Grid reference's operator is the model:
// Secrets only read by get, ConfigMaps never listed, watched or (unless
// asked) deleted, every write a patch or a server-side apply.
package rbac

import (
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// ClusterRules are granted cluster-wide: the Grid resources are
// cluster-scoped. Read them, patch their status, and patch a GridNetwork
// for its finalizer (which holds a deleted network until its overlays are
// withdrawn). GridSites are watched (their phases decide which remote
// providers reach overlays, and the agent probes each one), created by
// server-side apply for discovered sites, and their status patched; they
// are never deleted.
func ClusterRules() []rbacv1.PolicyRule {
	group := v1alpha1.GroupVersion.Group
	return []rbacv1.PolicyRule{
		{APIGroups: []string{group}, Resources: []string{"gridnetworks", "inferenceproviders"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{group}, Resources: []string{"gridnetworks"}, Verbs: []string{"patch"}},
		{APIGroups: []string{group}, Resources: []string{"gridnetworks/status", "inferenceproviders/status"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{group}, Resources: []string{"gridsites"}, Verbs: []string{"get", "list", "watch", "create", "patch"}},
		{APIGroups: []string{group}, Resources: []string{"gridsites/status"}, Verbs: []string{"get", "patch"}},
	}
}

// NamespaceRules are granted, through RoleBindings, in each namespace
// where gateways run or credential Secrets live: publish overlay
// ConfigMaps by server-side apply (get, create, patch), and get the
// Secrets that references name. deleteOrphans adds the delete verb on
// ConfigMaps, for the opt-in deletion of a removed gateway's overlay.
func NamespaceRules(deleteOrphans bool) []rbacv1.PolicyRule {
	configMaps := []string{"get", "create", "patch"}
	if deleteOrphans {
		configMaps = append(configMaps, "delete")
	}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: configMaps},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
	}
}

// LeaderElectionRules are granted in the agent's own namespace: the Lease
// that elects one active replica, and the Events of the leader's change
// and of the Grid objects' phases (cluster-scoped objects have no
// namespace of their own).
func LeaderElectionRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
}

// SwimServiceRules are granted in the agent's own namespace when its SWIM
// Service is on: the leader writes the Service's one EndpointSlice, so
// that peers reach the replica that is the site's member.
func SwimServiceRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "create", "patch"}},
	}
}

// GatewayDeploymentRules are what a gateway grants the agent on its own
// Deployment, by name, when it opts in to being rolled on a renewed site
// certificate (the praxis-gateway chart's overlay.identityRollout): get
// to read the pod template's annotation, patch to change it. The agent's
// own RBAC grants no Deployment access.
func GatewayDeploymentRules(name string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "patch"}, ResourceNames: []string{name}},
	}
}

// EnrollmentTokenRules are what the issuer agent needs of its enrolment
// token Secret (the chart's trust.enrollment.issuer): get to check a
// token, patch to spend it (a patch that carries the resource version
// read, so that a token is spent once however many agents race for it);
// by name. As the reference grants on Secrets, no update and no delete.
func EnrollmentTokenRules(name string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "patch"}, ResourceNames: []string{name}},
	}
}

// TrustSecretRules are granted, by name, on the grid CA and site
// certificate Secrets that GridNetworks name (spec.tls.caSecretRef,
// siteSecretRef): the agent generates the CA into a Secret that does not
// exist and issues the site certificate by server-side apply, which needs
// create as well as patch on a Secret not there yet. The chart restricts
// each grant to the named Secrets (resourceNames).
func TrustSecretRules(names ...string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create", "patch"}, ResourceNames: names},
	}
}

// DefaultRecordKeySecret names the Secret, in the agent's namespace, of
// the site's key for the records of networks without a grid CA.
const DefaultRecordKeySecret = "gridsync-record-key"

// RecordKeySecretRules are granted in the agent's own namespace, by name,
// on the Secret of the site's record key for networks without a grid CA
// (the chart's swim.recordKeySecret): get to read it, create and patch to
// write it by server-side apply when it does not exist yet.
func RecordKeySecretRules(name string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create", "patch"}, ResourceNames: []string{name}},
	}
}

// TokenReviewRules are granted cluster-wide when the signals listener
// takes delivery reports: each sidecar's projected token is checked with a
// TokenReview (create only; nothing is read).
func TokenReviewRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
	}
}

// ScraperRules are the scraper ServiceAccount's, cluster-wide: get on the
// /metrics URL and nothing else, what kube-rbac-proxy and the API
// server's own authorizer ask of a Prometheus scraper. The agent sends
// this account's short-lived tokens where a provider's metricsConfig.auth
// or healthCheck.auth asks for one.
func ScraperRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
	}
}

// ScraperTokenRules are granted to the agent in the scraper account's
// namespace: create a token of that one ServiceAccount (TokenRequest), by
// name; nothing else of it or of any other account.
func ScraperTokenRules(name string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}, ResourceNames: []string{name}},
	}
}
