package publish_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gridsync/gridsync/hack/release/kube"
)

// The charts of a release are packaged to the same bytes whenever they
// are: release assemble (what make release runs after the images) twice,
// a few seconds apart, writes the same chart packages and SHA256SUMS,
// every file in them stamped with SOURCE_DATE_EPOCH; another epoch gives
// other bytes. Helm reads the packages: it shows, lints and renders them,
// the images pinned by the layouts' digests.
func TestChartPackagesAreReproducible(t *testing.T) {
	helm := pinnedHelm(t)
	dir := t.TempDir()
	images := filepath.Join(dir, "images")
	digests := map[string]v1.Hash{}
	for _, imageName := range []string{"gridsync-agent", "gridsync-sidecar"} {
		idx, err := random.Index(64, 1, 2)
		require.NoError(t, err)
		p, err := layout.Write(filepath.Join(images, imageName), empty.Index)
		require.NoError(t, err)
		require.NoError(t, p.AppendIndex(idx))
		digests[imageName], err = idx.Digest()
		require.NoError(t, err)
	}
	const epoch = 1767225600 // 2026-01-01
	assemble := func(out string, epoch int64) {
		cmd := exec.CommandContext(t.Context(), "go", "run", "./hack/release", "assemble", "-images", images,
			"-kustomize", "deploy/kustomize", "-out", out, "-version", "1.2.3-test")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GRIDSYNC_HELM="+helm, "SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch, 10))
		printed, err := cmd.CombinedOutput()
		require.NoError(t, err, "release assemble:\n%s", printed)
	}
	first, second, other := filepath.Join(dir, "first"), filepath.Join(dir, "second"), filepath.Join(dir, "other")
	assemble(first, epoch)
	time.Sleep(1100 * time.Millisecond) // helm stamps the second it packages
	assemble(second, epoch)
	assemble(other, epoch+1)

	packages, err := filepath.Glob(filepath.Join(first, "charts", "*.tgz"))
	require.NoError(t, err)
	require.Len(t, packages, 2)
	for _, pkg := range packages {
		base := filepath.Base(pkg)
		want, err := os.ReadFile(pkg)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(second, "charts", base))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(want, got), "%s: packaged twice, the same bytes", base)
		otherEpoch, err := os.ReadFile(filepath.Join(other, "charts", base))
		require.NoError(t, err)
		assert.False(t, bytes.Equal(want, otherEpoch), "%s: another SOURCE_DATE_EPOCH, other bytes", base)
		for name, mtime := range packageTimes(t, want) {
			assert.Equal(t, int64(epoch), mtime.Unix(), "%s: %s", base, name)
		}
	}
	sums, err := os.ReadFile(filepath.Join(first, "SHA256SUMS"))
	require.NoError(t, err)
	sums2, err := os.ReadFile(filepath.Join(second, "SHA256SUMS"))
	require.NoError(t, err)
	assert.Equal(t, string(sums), string(sums2))

	helmEnv := []string{"HELM_CACHE_HOME=" + filepath.Join(dir, "helm", "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(dir, "helm", "config"), "HELM_DATA_HOME=" + filepath.Join(dir, "helm", "data")}
	agent := filepath.Join(first, "charts", "gridsync-agent-"+chartVersion(t, "gridsync-agent")+".tgz")
	assert.Contains(t, runHelm(t, helm, helmEnv, "show", "chart", agent), "appVersion: 1.2.3-test")
	runHelm(t, helm, helmEnv, "lint", agent)
	assert.Contains(t, runHelm(t, helm, helmEnv, "template", "r", agent, "--kube-version", kube.Version),
		"/gridsync-agent@"+digests["gridsync-agent"].String()+`"`)
	gateway := filepath.Join(first, "charts", "praxis-gateway-"+chartVersion(t, "praxis-gateway")+".tgz")
	assert.Contains(t, runHelm(t, helm, helmEnv, "template", "r", gateway, "--kube-version", kube.Version, "--set",
		"overlay.sidecar.enabled=true,overlay.sidecar.expectedNetwork=n,overlay.sidecar.expectedLocalSite=s,overlay.sidecar.expectedGateway=g"),
		"/gridsync-sidecar@"+digests["gridsync-sidecar"].String()+`"`)
}

// chartVersion is the version in the chart's Chart.yaml.
func chartVersion(t *testing.T, chart string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "charts", chart, "Chart.yaml"))
	require.NoError(t, err)
	var meta struct {
		Version string `yaml:"version"`
	}
	require.NoError(t, yaml.Unmarshal(data, &meta))
	return meta.Version
}

// packageTimes are the times of the files in a chart package, by name.
func packageTimes(t *testing.T, pkg []byte) map[string]time.Time {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(pkg))
	require.NoError(t, err)
	assert.True(t, zr.ModTime.IsZero(), "no time in the gzip header")
	tr := tar.NewReader(zr)
	out := map[string]time.Time{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out[hdr.Name] = hdr.ModTime
	}
}
