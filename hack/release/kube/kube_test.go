package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The charts are rendered for the Kubernetes the tests run: a bump of the
// pinned k8s.io/kubernetes that forgets Version would render the kustomize
// base and the goldens for an API server nothing runs.
func TestVersionIsThePinnedKubernetes(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "tools", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var pinned string
	for line := range strings.Lines(string(data)) {
		if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == "k8s.io/kubernetes" {
			pinned = fields[1]
		}
	}
	if pinned == "" {
		t.Fatal("hack/tools/go.mod requires no k8s.io/kubernetes")
	}
	if pinned != "v"+Version {
		t.Errorf("Version is %s, hack/tools/go.mod pins k8s.io/kubernetes %s", Version, pinned)
	}
}
