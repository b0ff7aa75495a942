package images

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/hack/release/kube"
)

// runMake runs make target from the repository's root, its binaries built
// into a folder of the test's, and returns what it printed.
func runMake(t *testing.T, target string, vars ...string) string {
	t.Helper()
	args := append([]string{"--no-print-directory", target, "BIN_DIR=" + filepath.Join(t.TempDir(), "bin")}, vars...)
	cmd := exec.CommandContext(t.Context(), "make", args...)
	cmd.Dir = filepath.Join("..", "..")
	// Run from `make test`, the outer make's jobserver is not this one's.
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=")
	printed, err := cmd.CombinedOutput()
	require.NoError(t, err, "make %s:\n%s", target, printed)
	return string(printed)
}

// makeImages runs `make images` into a folder of its own and returns it
// and what make printed.
func makeImages(t *testing.T) (string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "images")
	return out, runMake(t, "images", "IMAGES_DIR="+out)
}

// Two `make images` runs give the same layouts, byte for byte (the
// digests, the SBOMs, the archives); the binaries in the images are
// static Linux executables of the platform their image says (the arm64
// one checked by its ELF header; the amd64 image is the one the node
// tests run), run as nonroot 65532, with no shell; the labels name this
// commit.
func TestMakeImagesIsReproducibleForBothPlatforms(t *testing.T) {
	first, printed := makeImages(t)
	second, _ := makeImages(t)
	assert.Equal(t, filesBelow(t, first), filesBelow(t, second), "two runs, the same files")
	for _, s := range Shipped {
		assert.Contains(t, printed, "/"+s.Name+":")
	}

	revision, err := exec.CommandContext(t.Context(), "git", "rev-parse", "HEAD").Output()
	require.NoError(t, err)
	for _, s := range Shipped {
		p, err := layout.FromPath(filepath.Join(first, s.Name))
		require.NoError(t, err)
		top, err := p.ImageIndex()
		require.NoError(t, err)
		tm, err := top.IndexManifest()
		require.NoError(t, err)
		idx, err := top.ImageIndex(tm.Manifests[0].Digest)
		require.NoError(t, err)
		im, err := idx.IndexManifest()
		require.NoError(t, err)
		assert.Equal(t, strings.TrimSpace(string(revision)), im.Annotations["org.opencontainers.image.revision"])
		assert.NotEmpty(t, im.Annotations["org.opencontainers.image.version"])
		assert.NotEmpty(t, im.Annotations["org.opencontainers.image.source"])
		require.Len(t, im.Manifests, 2)
		for _, d := range im.Manifests {
			img, err := idx.Image(d.Digest)
			require.NoError(t, err)
			cfg, err := img.ConfigFile()
			require.NoError(t, err)
			assert.Equal(t, "65532:65532", cfg.Config.User)
			files := contents(t, img)
			for _, shell := range []string{"bin/sh", "bin/bash", "bin/busybox"} {
				assert.NotContains(t, files, shell, "%s has no shell", s.Name)
			}
			want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[d.Platform.Architecture]
			require.NotZero(t, want, d.Platform.String())
			for _, b := range s.Binaries {
				data, ok := files["usr/local/bin/"+b]
				require.True(t, ok, "%s in %s", b, d.Platform)
				f, err := elf.NewFile(bytes.NewReader(data))
				require.NoError(t, err)
				assert.Equal(t, want, f.Machine, "%s of %s", b, d.Platform)
				assert.Equal(t, elf.ELFOSABI_NONE, f.OSABI)
				for _, prog := range f.Progs {
					assert.NotEqual(t, elf.PT_INTERP, prog.Type, "%s is static: no interpreter", b)
				}
				_ = f.Close()
			}
		}
	}
}

// filesBelow is every file below dir with its content.
func filesBelow(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(data)
		return err
	}))
	return out
}

// contents is every regular file and symbolic link of an image, all
// layers applied, with its content.
func contents(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	walkImage(t, img, func(hdr *tar.Header, r io.Reader) {
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeSymlink {
			data, err := io.ReadAll(r)
			require.NoError(t, err)
			out[hdr.Name] = data
		}
	})
	return out
}

// `make release` ships the image layouts, the two charts packaged with the
// images' index digests in their values (so that they render the images
// by digest), the CRDs, the kustomize base, and a SHA256SUMS that every
// other file matches.
func TestMakeReleaseShipsChartsPinnedToTheImages(t *testing.T) {
	out := filepath.Join(t.TempDir(), "release")
	runMake(t, "release", "RELEASE_DIR="+out)

	files := filesBelow(t, out)
	sums := strings.Split(strings.TrimSpace(files["SHA256SUMS"]), "\n")
	assert.Len(t, sums, len(files)-1, "every other file is listed")
	for _, line := range sums {
		sum, name, ok := strings.Cut(line, "  ")
		require.True(t, ok, line)
		data, ok := files[filepath.FromSlash(name)]
		require.True(t, ok, name)
		h, _, err := v1.SHA256(strings.NewReader(data))
		require.NoError(t, err)
		assert.Equal(t, h.Hex, sum, name)
	}
	for _, want := range []string{"crds/grid.praxis.fast_gridnetworks.yaml", "kustomize/gridsync-agent/kustomization.yaml",
		"charts/gridsync-agent-0.1.0.tgz", "charts/praxis-gateway-0.1.0.tgz"} {
		assert.Contains(t, files, filepath.FromSlash(want))
	}

	digest := func(name string) string {
		p, err := layout.FromPath(filepath.Join(out, "images", name))
		require.NoError(t, err)
		idx, err := p.ImageIndex()
		require.NoError(t, err)
		m, err := idx.IndexManifest()
		require.NoError(t, err)
		return m.Manifests[0].Digest.String()
	}
	helm := os.Getenv("GRIDSYNC_HELM")
	require.NotEmpty(t, helm, "the pinned helm (make exports GRIDSYNC_HELM)")
	render := func(chart string, set ...string) string {
		args := append([]string{"template", "r", filepath.Join(out, "charts", chart), "--kube-version", kube.Version}, set...)
		rendered, err := exec.CommandContext(t.Context(), helm, args...).CombinedOutput()
		require.NoError(t, err, "%s", rendered)
		return string(rendered)
	}
	assert.Contains(t, render("gridsync-agent-0.1.0.tgz"), "/gridsync-agent@"+digest("gridsync-agent")+`"`)
	assert.Contains(t, render("praxis-gateway-0.1.0.tgz", "--set", "overlay.sidecar.enabled=true,overlay.sidecar.expectedNetwork=n,overlay.sidecar.expectedLocalSite=s,overlay.sidecar.expectedGateway=g"),
		"/gridsync-sidecar@"+digest("gridsync-sidecar")+`"`)
}
