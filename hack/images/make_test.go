package images

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/pem"
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
	"golang.org/x/crypto/x509roots/fallback/bundle"

	"github.com/gridsync/gridsync/hack/release/kube"
)

// runMake runs make target from the repository's root, its binaries built
// into a folder of the test's, and returns what it printed.
func runMake(t *testing.T, target string, vars ...string) string {
	t.Helper()
	return runMakeOn(t, machine{}, target, vars...)
}

// machine is how a machine that builds the images differs from this one:
// the command make runs under (its arguments follow), and what make's
// environment adds to this one's.
type machine struct {
	wrap []string
	env  []string
}

// runMakeOn is runMake as on machine m.
func runMakeOn(t *testing.T, m machine, target string, vars ...string) string {
	t.Helper()
	args := append([]string{"make", "--no-print-directory", target, "BIN_DIR=" + filepath.Join(t.TempDir(), "bin")}, vars...)
	args = append(append([]string(nil), m.wrap...), args...)
	cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
	cmd.Dir = filepath.Join("..", "..")
	// Run from `make test`, the outer make's jobserver is not this one's.
	cmd.Env = append(append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL="), m.env...)
	printed, err := cmd.CombinedOutput()
	require.NoError(t, err, "make %s:\n%s", target, printed)
	return string(printed)
}

// anotherMachine is a machine unlike this one in what the images must not
// depend on: another CA bundle where Debian keeps it (/etc/ssl/certs
// replaced, for make alone, by a folder whose ca-certificates.crt holds a
// single root, as another ca-certificates version would hold other roots;
// this needs a mount namespace, which root gets where the machine allows
// it, and the test says so when it cannot), SSL_CERT_FILE naming that
// other bundle and SSL_CERT_DIR an empty folder, another time zone
// (UTC+12:45), umask 077 rather than 022, the POSIX locale rather than a
// UTF-8 one, and another TMPDIR.
func anotherMachine(t *testing.T) machine {
	t.Helper()
	dir := t.TempDir()
	certs, empty, tmp := filepath.Join(dir, "certs"), filepath.Join(dir, "empty"), filepath.Join(dir, "tmp")
	for _, d := range []string{certs, empty, tmp} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	var one []byte
	for root := range bundle.Roots() {
		one = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate})
		break
	}
	require.NoError(t, os.WriteFile(filepath.Join(certs, "ca-certificates.crt"), one, 0o644))
	m := machine{
		wrap: []string{"sh", "-c", `umask 077 && exec "$@"`, "sh"},
		env: []string{
			"SSL_CERT_FILE=" + filepath.Join(certs, "ca-certificates.crt"), "SSL_CERT_DIR=" + empty,
			"TZ=CHAST-12:45", "LANG=POSIX", "LC_ALL=POSIX", "TMPDIR=" + tmp,
		},
	}
	probe, err := exec.CommandContext(t.Context(), "unshare", "--mount", "mount", "--bind", certs, "/etc/ssl/certs").CombinedOutput()
	if err != nil {
		t.Logf("/etc/ssl/certs stays this machine's (no mount namespace here: %v %s); the other differences are tried", err, probe)
		return m
	}
	// unshare makes the namespace's mounts private: the host's
	// /etc/ssl/certs is left as it is.
	m.wrap = []string{"unshare", "--mount", "sh", "-c", `mount --bind "$0" /etc/ssl/certs && umask 077 && exec "$@"`, certs}
	return m
}

// makeImages runs `make images` on machine m into a folder of its own and
// returns it and what make printed.
func makeImages(t *testing.T, m machine) (string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "images")
	return out, runMakeOn(t, m, "images", "IMAGES_DIR="+out)
}

// Two `make images` runs, the second as on another machine (anotherMachine
// says how it differs: another CA bundle on it, another time zone, umask
// and locale), give the same layouts, byte for byte (the digests, the
// SBOMs, the archives); the binaries in the images are static Linux
// executables of the platform their image says (the arm64 one checked by
// its ELF header; the amd64 image is the one the node tests run), run as
// nonroot 65532, with no shell; the labels name this commit.
func TestMakeImagesIsReproducibleForBothPlatforms(t *testing.T) {
	first, printed := makeImages(t, machine{})
	second, _ := makeImages(t, anotherMachine(t))
	// Compared by SHA-256, so that a difference is shown as the files
	// that differ rather than their bytes.
	assert.Equal(t, sums(filesBelow(t, first)), sums(filesBelow(t, second)), "this machine and another, the same files")
	for _, s := range Shipped {
		assert.Contains(t, printed, "/"+s.Name+":")
	}

	revision, err := exec.CommandContext(t.Context(), "git", "rev-parse", "HEAD").Output()
	require.NoError(t, err)
	ca, err := theCABundle()
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
			assert.Equal(t, ca.pem, files[strings.TrimPrefix(caBundlePath, "/")], "%s carries the bundle made from the pinned module", s.Name)
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

// sums is the SHA-256 of each file's content.
func sums(files map[string]string) map[string]string {
	out := make(map[string]string, len(files))
	for name, data := range files {
		h, _, _ := v1.SHA256(strings.NewReader(data)) // reading a string does not fail
		out[name] = h.Hex
	}
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
