package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gridsync/gridsync/hack/release/publish"
	"github.com/gridsync/gridsync/test/testregistry"
)

// shippedUnder is where a release names its images (the Makefile's
// IMAGE_REGISTRY), which its charts pin by digest.
const shippedUnder = "ghcr.io/gridsync"

// aRelease is a release published to a registry on loopback.
type aRelease struct {
	registry *testregistry.Registry
	// pushed by kind and name: "chart/praxis-gateway", "image/gridsync-agent".
	pushed map[string]publish.Pushed
}

// publishARelease does what a releaser does: make release, then make
// publish into a registry (the pinned distribution registry, standing for
// the one the images are named under), and prints what was pushed.
func publishARelease(ctx context.Context, work string) (*aRelease, error) {
	step("a release as users get it: make release, make publish into a registry on loopback")
	began := time.Now()
	dir := filepath.Join(work, "release")
	if err := makeTarget(ctx, "release", "RELEASE_DIR="+dir, "BIN_DIR="+filepath.Join(work, "release-bin")); err != nil {
		return nil, err
	}
	fmt.Printf("    make release: two images for linux/amd64 and linux/arm64 and two charts pinning their digests, in %s\n", time.Since(began).Round(100*time.Millisecond))
	regDir := filepath.Join(work, "registry")
	if err := os.MkdirAll(regDir, 0o755); err != nil {
		return nil, err
	}
	reg, err := testregistry.Start(ctx, regDir)
	if err != nil {
		return nil, err
	}
	record := filepath.Join(work, "published.json")
	if err := makeTarget(ctx, "publish", "RELEASE_DIR="+dir, "BIN_DIR="+filepath.Join(work, "release-bin"),
		"REGISTRY="+reg.Host, "REGISTRY_CA="+reg.CAFile, "PUBLISHED="+record); err != nil {
		_ = reg.Stop()
		return nil, err
	}
	data, err := os.ReadFile(record)
	if err != nil {
		_ = reg.Stop()
		return nil, err
	}
	var list []publish.Pushed
	if err := json.Unmarshal(data, &list); err != nil {
		_ = reg.Stop()
		return nil, err
	}
	r := &aRelease{registry: reg, pushed: map[string]publish.Pushed{}}
	for _, p := range list {
		r.pushed[string(p.Kind)+"/"+filepath.Base(p.Repository)] = p
		ref := p.Repository + "@" + p.Digest
		if p.Tag != "" {
			ref = p.Repository + ":" + p.Tag + " " + p.Digest
		}
		fmt.Printf("    pushed %-8s %s\n", p.Kind, ref)
	}
	return r, nil
}

// chart is where helm installs name's chart from: its oci:// reference
// and the flags saying which version and which CA.
func (r *aRelease) chart(name string) (string, []string) {
	p := r.pushed[string(publish.Chart)+"/"+name]
	return "oci://" + p.Repository, []string{"--version", p.Tag, "--ca-file", r.registry.CAFile}
}

// image is how the charts name the release's image name: under
// shippedUnder, by the digest pushed.
func (r *aRelease) image(name string) string {
	return shippedUnder + "/" + name + "@" + r.pushed[string(publish.Image)+"/"+name].Digest
}

// makeTarget runs make target from the repository's root, printing its
// output only when it fails.
func makeTarget(ctx context.Context, target string, vars ...string) error {
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", target}, vars...)...)
	// Run from make demo, the outer make's jobserver is not this one's.
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("make %s: %w\n%s", target, err, strings.TrimSpace(string(out)))
	}
	return nil
}
