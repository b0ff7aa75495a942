package images

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"runtime/debug"
	"sort"
	"strconv"
	"sync"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The images' CA bundle is Mozilla's root store as the Go project
// publishes it in this module, at the version go.mod pins. A copy of the
// building machine's own bundle, as distroless/static's is of Debian's
// ca-certificates, would differ from one machine to the next with that
// package's version, and so would the images' digests; the module gives
// every machine the same roots.
const caModule = "golang.org/x/crypto/x509roots/fallback"

// caModuleVersion is the version of caModule that go.mod requires, which
// the bundle's header and the SBOM name. It is written here because a
// test binary's build information lists no modules to read it from; a
// test holds it to go.mod, and a build that compiled in another version
// fails (compiledVersion) rather than name the roots wrongly.
const caModuleVersion = "v0.0.0-20261030153154-30a33513ff6d"

// caBundlePath is where the images keep the bundle: where Debian and
// distroless/static keep theirs, and what the images' SSL_CERT_FILE names.
const caBundlePath = "/etc/ssl/certs/ca-certificates.crt"

// caBundle is the images' CA bundle and the module version it is made
// from.
type caBundle struct {
	// module and version are the Go module the roots come from.
	module, version string
	// pem is the file written into the images.
	pem []byte
	// roots is how many certificates it holds; left is how many of the
	// module's roots it leaves out (see caPEM).
	roots, left int
}

// theCABundle is made once: it is the same for every image of a build.
var theCABundle = sync.OnceValues(func() (caBundle, error) {
	if err := compiledVersion(); err != nil {
		return caBundle{}, fmt.Errorf("CA bundle: %w", err)
	}
	var unconstrained [][]byte
	left := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			left++
			continue
		}
		unconstrained = append(unconstrained, root.Certificate)
	}
	if len(unconstrained) == 0 {
		// Images that trust no CA would fail only later, at run time.
		return caBundle{}, fmt.Errorf("CA bundle: %s %s has no roots", caModule, caModuleVersion)
	}
	data, n := caPEM(caModule, caModuleVersion, unconstrained, left)
	return caBundle{module: caModule, version: caModuleVersion, pem: data, roots: n, left: left}, nil
})

// compiledVersion checks that the program was built with caModule at
// caModuleVersion, as its build information says: a go.mod that moved to
// another version, or replaced the module by another, with
// caModuleVersion left behind would otherwise give images whose bundle
// and SBOM name roots they do not hold. A test binary lists no modules;
// there the tests hold caModuleVersion to go.mod.
func compiledVersion() error {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	for _, d := range info.Deps {
		if d.Path != caModule {
			continue
		}
		if d.Replace != nil {
			return fmt.Errorf("%s is replaced by %s %s: the bundle is made from the module's own release", caModule, d.Replace.Path, d.Replace.Version)
		}
		if d.Version != caModuleVersion {
			return fmt.Errorf("built with %s %s, but caModuleVersion says %s: change it with go.mod", caModule, d.Version, caModuleVersion)
		}
	}
	return nil
}

// caPEM writes the DER certificates certs as a PEM bundle: a header
// naming the module and version they come from, then one CERTIFICATE
// block per certificate, each after a comment with its SHA-256
// fingerprint, sorted by that fingerprint and without duplicates, so that
// the same module version gives the same bytes whatever order the roots
// come in. The header also says how many roots (left) were left out: the
// module marks some roots as trusted only for certificates issued before a
// date, which a PEM file cannot say; trusting them for every certificate
// would trust more than Mozilla does, so they are not in the bundle.
// It returns the bundle and how many certificates it holds.
func caPEM(module, version string, certs [][]byte, left int) ([]byte, int) {
	type root struct {
		sum string
		der []byte
	}
	seen := map[string]bool{}
	var roots []root
	for _, der := range certs {
		sum := sha256.Sum256(der)
		h := hex.EncodeToString(sum[:])
		if seen[h] {
			continue
		}
		seen[h] = true
		roots = append(roots, root{sum: h, der: der})
	}
	sort.Slice(roots, func(i, j int) bool { return roots[i].sum < roots[j].sum })

	var b bytes.Buffer
	b.WriteString("# The CA certificates of the gridsync images: Mozilla's root store as the Go\n")
	b.WriteString("# project publishes it in the module\n")
	b.WriteString("# " + module + " " + version + ",\n")
	b.WriteString("# " + strconv.Itoa(len(roots)) + " certificates, sorted by SHA-256 fingerprint. Left out (" + strconv.Itoa(left) + "): the\n")
	b.WriteString("# roots the module trusts only for certificates issued before a date, which\n")
	b.WriteString("# a PEM file cannot say. Written by the image build from that module alone;\n")
	b.WriteString("# do not edit.\n")
	for _, r := range roots {
		b.WriteString("\n# SHA-256 " + r.sum + "\n")
		// pem.Encode writes to a bytes.Buffer, which does not fail.
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.der})
	}
	return b.Bytes(), len(roots)
}
