package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// BinDirEnv overrides where the kube-apiserver and etcd binaries are found.
const BinDirEnv = "GRIDSYNC_TOOLS_BIN"

// BinDir is the folder of the pinned tools `make tools` built (the node's
// kubelet, containerd and the rest beside the servers).
func BinDir() (string, error) { return findBinDir() }

// findBinDir returns the folder holding kube-apiserver and etcd: $BinDirEnv,
// or .tools/bin in the nearest enclosing folder that has one (tests run in
// their package folder, somewhere below the repository root).
func findBinDir() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return dir, checkBinaries(dir)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find tools: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		candidate := filepath.Join(dir, ".tools", "bin")
		if _, err := os.Stat(candidate); err == nil {
			return candidate, checkBinaries(candidate)
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return "", errors.New("kube-apiserver and etcd not found: run `make tools` to build the pinned servers, or set " + BinDirEnv)
}

func checkBinaries(dir string) error {
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("%s not found in %s: run `make tools`: %w", name, dir, err)
		}
	}
	return nil
}
