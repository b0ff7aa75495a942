// Package kube names the Kubernetes version the project is built and tested
// for. It lives beside the release tool, which renders the kustomize base
// for it, so that the tool needs nothing of the tests; the tests that render
// the charts import it from here.
package kube

// Version is the version the charts are rendered for: the pinned API
// server's and kubelet's (k8s.io/kubernetes in hack/tools/go.mod).
const Version = "1.37.2"
