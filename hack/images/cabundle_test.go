package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// pinnedCAVersion is the CA module's version as go.mod requires it.
func pinnedCAVersion(t *testing.T) string {
	t.Helper()
	gomod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(caModule) + `\s+(\S+)`).FindSubmatch(gomod)
	require.NotNil(t, m, "go.mod requires %s", caModule)
	return string(m[1])
}

// certificates are the PEM blocks of a bundle, each checked to be a
// certificate, keyed by SHA-256 fingerprint.
func certificates(t *testing.T, data []byte) map[string]*x509.Certificate {
	t.Helper()
	out := map[string]*x509.Certificate{}
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		require.Equal(t, "CERTIFICATE", block.Type)
		require.Empty(t, block.Headers)
		cert, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err)
		sum := sha256.Sum256(block.Bytes)
		h := hex.EncodeToString(sum[:])
		require.NotContains(t, out, h, "each certificate once")
		out[h] = cert
	}
	assert.Empty(t, strings.TrimSpace(string(data)), "nothing after the last certificate")
	return out
}

// The images' CA bundle is every root of the module at the version go.mod
// pins, less those the module trusts only for certificates issued before a
// date: certificates, each a CA, that crypto/x509 loads as the binaries'
// SSL_CERT_FILE; its header names the module and that version.
func TestCABundleIsThePinnedModulesRoots(t *testing.T) {
	ca, err := theCABundle()
	require.NoError(t, err)
	version := pinnedCAVersion(t)
	assert.Equal(t, caModule, ca.module)
	assert.Equal(t, version, ca.version, "the version go.mod pins")

	got := certificates(t, ca.pem)
	require.NotEmpty(t, got)
	assert.Len(t, got, ca.roots)
	for h, cert := range got {
		assert.True(t, cert.IsCA, "%s is a CA", h)
	}
	want, left := map[string]bool{}, 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			left++
			continue
		}
		sum := sha256.Sum256(root.Certificate)
		want[hex.EncodeToString(sum[:])] = true
	}
	assert.Equal(t, left, ca.left)
	assert.Len(t, got, len(want))
	for h := range want {
		assert.Contains(t, got, h)
	}
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca.pem))

	header, _, _ := bytes.Cut(ca.pem, []byte("\n\n"))
	assert.Contains(t, string(header), caModule+" "+version)
	for _, line := range strings.Split(string(header), "\n") {
		assert.True(t, strings.HasPrefix(line, "# "), "the header is comments: %q", line)
	}
}

// The bundle is the same bytes whatever order the roots come in and
// however often they are written (sorted, duplicates dropped), and every
// image carries exactly it.
func TestCABundleIsDeterministic(t *testing.T) {
	ca, err := theCABundle()
	require.NoError(t, err)
	var roots [][]byte
	for root := range bundle.Roots() {
		if root.Constraint == nil {
			roots = append(roots, root.Certificate)
		}
	}
	again, n := caPEM(ca.module, ca.version, roots, ca.left)
	assert.Equal(t, ca.pem, again)
	assert.Equal(t, ca.roots, n)

	shuffled := append(append([][]byte(nil), roots...), roots[:3]...)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	other, n := caPEM(ca.module, ca.version, shuffled, ca.left)
	assert.Equal(t, ca.pem, other, "another order, some twice: the same bundle")
	assert.Equal(t, ca.roots, n)

	// Another version is another header: the bundle names what it is made
	// from.
	newer, _ := caPEM(ca.module, "v0.0.1", roots, ca.left)
	assert.NotEqual(t, ca.pem, newer)

	bins := fakeBinaries(t)
	for _, arch := range []string{"amd64", "arm64"} {
		for range 2 {
			img, err := Build(Agent, bins, arch, Meta{})
			require.NoError(t, err)
			var inImage []byte
			walkImage(t, img, func(hdr *tar.Header, r io.Reader) {
				if "/"+hdr.Name == caBundlePath {
					inImage, err = io.ReadAll(r)
					require.NoError(t, err)
				}
			})
			assert.Equal(t, ca.pem, inImage, "linux/%s carries the bundle", arch)
		}
	}
}

// The SBOM lists the CA bundle, which the image ships though no binary is
// built from it: under the module and version it is made from, with the
// SHA-256 of the file in the image, described by the document.
func TestSBOMListsTheCABundle(t *testing.T) {
	ca, err := theCABundle()
	require.NoError(t, err)
	bins := goBinary(t, Agent)
	doc, err := SBOM(Agent, testMeta, []string{filepath.Join(bins, "gridsync-agent")})
	require.NoError(t, err)
	var spdx struct {
		Packages []struct {
			Name, SPDXID, VersionInfo, SourceInfo, DownloadLocation, PrimaryPackagePurpose string
			Checksums                                                                      []struct{ Algorithm, ChecksumValue string }
			ExternalRefs                                                                   []struct{ ReferenceType, ReferenceLocator string }
		}
		Relationships []struct{ SpdxElementID, RelationshipType, RelatedSpdxElement string }
	}
	require.NoError(t, json.Unmarshal(doc, &spdx))
	var found bool
	for _, p := range spdx.Packages {
		if p.SPDXID != caBundleSPDXID {
			continue
		}
		found = true
		version := pinnedCAVersion(t)
		assert.Equal(t, caBundlePath, p.Name)
		assert.Equal(t, version, p.VersionInfo)
		assert.Equal(t, "FILE", p.PrimaryPackagePurpose)
		assert.Contains(t, p.SourceInfo, caModule+" "+version)
		assert.Equal(t, "https://proxy.golang.org/"+caModule+"/@v/"+version+".zip", p.DownloadLocation)
		sum := sha256.Sum256(ca.pem)
		assert.Equal(t, []struct{ Algorithm, ChecksumValue string }{{"SHA256", hex.EncodeToString(sum[:])}}, p.Checksums)
		require.Len(t, p.ExternalRefs, 1)
		assert.Equal(t, "pkg:golang/"+caModule+"@"+version, p.ExternalRefs[0].ReferenceLocator)
	}
	assert.True(t, found, "the SBOM lists the CA bundle")
	assert.Contains(t, spdx.Relationships, struct{ SpdxElementID, RelationshipType, RelatedSpdxElement string }{
		"SPDXRef-DOCUMENT", "DESCRIBES", caBundleSPDXID,
	})
}
