// Package kubeconfig finds the Kubernetes client configuration of a
// gridsync binary: an explicit --kubeconfig file, else the pod's
// in-cluster ServiceAccount, else $KUBECONFIG or ~/.kube/config for
// out-of-cluster use.
package kubeconfig

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Load returns the client configuration. path is the --kubeconfig flag;
// userAgent names the binary in the API server's audit log.
func Load(path, userAgent string) (*rest.Config, error) {
	cfg, err := load(path)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}

func load(path string) (*rest.Config, error) {
	if path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("load --kubeconfig %s: %w", path, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err == nil {
		return cfg, nil
	}
	if !errors.Is(err, rest.ErrNotInCluster) {
		return nil, fmt.Errorf("load in-cluster configuration: %w", err)
	}
	// Out of cluster: $KUBECONFIG (a list of files) or ~/.kube/config.
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("not in a cluster and no usable kubeconfig (set --kubeconfig or KUBECONFIG): %w", err)
	}
	return cfg, nil
}
