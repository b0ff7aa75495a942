// Package controlplane runs a real Kubernetes control plane for tests: etcd
// and kube-apiserver, built by `make tools` from the versions pinned in
// hack/tools, started on free loopback ports in a temporary folder.
//
// It gives tests an admin client, clients that act as a ServiceAccount
// (through the TokenRequest API, so RBAC is really enforced), CRD
// installation, and a way to stop and restart kube-apiserver on the same
// etcd for fault tests. Child processes are started in their own process
// group with a parent-death signal, so nothing is left behind when a test
// binary fails, panics or is killed by its timeout.
//
// One control plane per test package is the intended use:
//
//	var cp *controlplane.ControlPlane
//
//	func TestMain(m *testing.M) { os.Exit(controlplane.RunTests(m, &cp)) }
package controlplane
