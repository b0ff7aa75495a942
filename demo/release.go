package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
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
	step("a release as users get it: make release, make publish into a registry on loopback, signed with the releaser's key")
	began := time.Now()
	dir := filepath.Join(work, "release")
	if _, err := makeTarget(ctx, "release", "RELEASE_DIR="+dir, "BIN_DIR="+filepath.Join(work, "release-bin")); err != nil {
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
	key, pub, err := releaserKey(work)
	if err != nil {
		_ = reg.Stop()
		return nil, err
	}
	record := filepath.Join(work, "published.json")
	if _, err := makeTarget(ctx, "publish", "RELEASE_DIR="+dir, "BIN_DIR="+filepath.Join(work, "release-bin"),
		"REGISTRY="+reg.Host, "REGISTRY_CA="+reg.CAFile, "PUBLISHED="+record, "SIGNING_KEY="+key); err != nil {
		_ = reg.Stop()
		return nil, err
	}
	list, err := publish.ReadRecord(record)
	if err != nil {
		_ = reg.Stop()
		return nil, err
	}
	r := &aRelease{registry: reg, pushed: map[string]publish.Pushed{}}
	for _, p := range list {
		r.pushed[string(p.Kind)+"/"+filepath.Base(p.Repository)] = p
		ref := p.Reference()
		if p.Tag != "" {
			ref = p.Repository + ":" + p.Tag + " " + p.Digest
		}
		fmt.Printf("    pushed %-11s %s\n", p.Kind, ref)
	}

	step("make verify with the releaser's public key, offline: every image and chart signed, every image's provenance attested")
	out, err := makeTarget(ctx, "verify", "PUBLISHED="+record, "REGISTRY_CA="+reg.CAFile, "PUBLIC_KEY="+pub)
	if err != nil {
		_ = reg.Stop()
		return nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "verify:") {
			fmt.Println("    " + line)
		}
	}
	return r, nil
}

// releaserKey writes a P-256 key pair, the releaser's: cosign.key
// unencrypted in PKCS #8 (cosign generate-key-pair's encrypted key works
// the same, with COSIGN_PASSWORD) and cosign.pub.
func releaserKey(work string) (key, pub string, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	private, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return "", "", err
	}
	public, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return "", "", err
	}
	key, pub = filepath.Join(work, "cosign.key"), filepath.Join(work, "cosign.pub")
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: private}), 0o600); err != nil {
		return "", "", err
	}
	return key, pub, os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: public}), 0o644)
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

// makeTarget runs make target in the folder the demo runs in (make demo
// runs it at the repository's root) and returns what it printed, which a
// failure's error holds.
func makeTarget(ctx context.Context, target string, vars ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", target}, vars...)...)
	// Run from make demo, the outer make's jobserver is not this one's.
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("make %s: %w\n%s", target, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
