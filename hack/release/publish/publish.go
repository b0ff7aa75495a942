// Package publish pushes what `make release` wrote to an OCI registry:
// each image index (every platform) by its digest and then its tag, the
// documents attached to it in its layout (the SBOM, the provenance) as OCI
// referrers whose subject is that index, and each packaged chart as an OCI
// artifact in Helm's format, so that `helm install oci://...` installs it.
//
// Everything is pushed by digest before it is tagged, and the digests are
// the layouts' and the packages' own: the digest a chart pins is the one
// the registry serves. What is already in the registry is not written
// again, so a second run pushes nothing; referrers are only ever added,
// never replaced, so that a later step (signing) can attach its own to
// the same subjects and a new run of publish keeps them.
//
// Registries without the OCI referrers API (the CNCF distribution
// registry, for one) get the referrers tag schema of the OCI distribution
// spec instead: an image index tagged sha256-<hex> listing the referrers
// of the manifest with that digest, which the client library keeps.
//
// With a signer, each image index and chart is signed as cosign signs
// (sha256-<hex>.sig) and each image's provenance is signed as an in-toto
// attestation of it (sha256-<hex>.att), see package sign; publishing
// without one must be asked for (Options.Unsigned).
package publish

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.yaml.in/yaml/v3"

	"github.com/gridsync/gridsync/hack/images"
	"github.com/gridsync/gridsync/hack/release/sign"
)

// Helm's media types for a chart stored in an OCI registry: the config is
// the chart's metadata as JSON, the one layer the packaged chart.
const (
	HelmConfigMediaType = "application/vnd.cncf.helm.config.v1+json"
	HelmChartMediaType  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// refNameAnnotation names the image index in a layout (hack/images writes
// the full reference there: registry, repository and tag).
const refNameAnnotation = "org.opencontainers.image.ref.name"

// Kind is what a pushed manifest is.
type Kind string

// The kinds of what is pushed.
const (
	Image       Kind = "image"       // an image index, every platform's image under it
	Referrer    Kind = "referrer"    // an artifact attached to an image index (SBOM, provenance)
	Chart       Kind = "chart"       // a Helm chart
	Signature   Kind = "signature"   // cosign's signatures of an image index or chart (sha256-<hex>.sig)
	Attestation Kind = "attestation" // cosign's attestations of an image index (sha256-<hex>.att): its signed provenance
)

// Pushed is one manifest in the registry after a run: what a later step
// (signing) attaches its referrers to.
type Pushed struct {
	Kind Kind `json:"kind"`
	// Repository is the registry and repository, without tag or digest.
	Repository string `json:"repository"`
	// Digest is the manifest's digest, the same as in the release.
	Digest string `json:"digest"`
	// Tag is the tag it is pushed under; referrers have none.
	Tag       string `json:"tag,omitempty"`
	MediaType string `json:"mediaType"`
	// ArtifactType says what a referrer carries (the SBOM's or the
	// provenance's media type), or a signature's or an attestation's
	// layers (cosign's simple-signing payload, a DSSE envelope).
	ArtifactType string `json:"artifactType,omitempty"`
	// Subject is the digest of the manifest a referrer, a signature or an
	// attestation is of.
	Subject string `json:"subject,omitempty"`
	// Existed is true when the registry held it already: nothing was
	// written for it.
	Existed bool `json:"existed"`
}

// WriteRecord writes what was pushed to file, as JSON: the record that
// make verify, the tests and the demo read with ReadRecord.
func WriteRecord(file string, pushed []Pushed) error {
	data, err := json.MarshalIndent(pushed, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, append(data, '\n'), 0o644)
}

// ReadRecord reads what WriteRecord wrote.
func ReadRecord(file string) ([]Pushed, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var pushed []Pushed
	if err := json.Unmarshal(data, &pushed); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return pushed, nil
}

// Reference is repository@digest, by which it is pulled.
func (p Pushed) Reference() string { return p.Repository + "@" + p.Digest }

// String is the line publish prints for it.
func (p Pushed) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s ", p.Kind)
	if p.Kind == Chart {
		b.WriteString("oci://")
	}
	b.WriteString(p.Repository)
	if p.Tag != "" {
		b.WriteString(":" + p.Tag)
	}
	b.WriteString("@" + p.Digest)
	if p.ArtifactType != "" {
		fmt.Fprintf(&b, " %s of %s", p.ArtifactType, p.Subject)
	}
	if p.Existed {
		b.WriteString(" (already there)")
	} else {
		b.WriteString(" (pushed)")
	}
	return b.String()
}

// Options say what to publish and where.
type Options struct {
	// Release is the folder `make release` wrote: images/<name>/ (OCI
	// layouts) and charts/*.tgz.
	Release string
	// Registry, when set (host or host:port), replaces the registry of
	// every repository the layouts name; the repositories' paths stay.
	Registry string
	// Insecure speaks plain HTTP to the registry. Loopback registries are
	// tried over HTTPS first and then HTTP without it.
	Insecure bool
	// Remote are the registry client's options: its transport (the CA
	// the registry's certificate is checked against) and credentials.
	Remote []remote.Option
	// Log, when set, gets a line for each manifest as it is pushed.
	Log io.Writer
	// Signer signs each image index and chart and attests each image's
	// provenance. Without one, Unsigned must say to publish unsigned.
	Signer *sign.Signer
	// Unsigned publishes without signatures: an explicit choice.
	Unsigned bool
}

// ErrUnsigned is publishing without a signer, not asked for.
var ErrUnsigned = errors.New("refusing to publish unsigned: give the signing key (make publish SIGNING_KEY=cosign.key, release publish -key), or say UNSIGNED=1 (-unsigned) to publish without signatures")

// image is one image layout of the release.
type image struct {
	dir       string
	repo      name.Repository
	tag       string
	index     v1.ImageIndex
	digest    v1.Hash
	referrers []v1.Descriptor // the layout's manifests whose subject is the index
	layout    layout.Path
}

// chart is one packaged chart of the release.
type chart struct {
	file     string
	name     string
	version  string
	manifest []byte // the OCI manifest, built from the package alone
	config   v1.Layer
	content  v1.Layer
	pins     map[string]string // image name (last path element) → digest its values pin
}

// Publish pushes the release in o.Release and returns what the registry
// holds of it, in the order pushed: each image, its referrers, then the
// charts. Before anything is pushed it checks that every digest a chart
// pins is the digest of an image of the release.
func Publish(ctx context.Context, o Options) ([]Pushed, error) {
	switch {
	case o.Signer == nil && !o.Unsigned:
		return nil, ErrUnsigned
	case o.Signer != nil && o.Unsigned:
		return nil, errors.New("a signing key and unsigned both: say one")
	}
	images, err := readImages(filepath.Join(o.Release, "images"), o)
	if err != nil {
		return nil, err
	}
	charts, err := readCharts(filepath.Join(o.Release, "charts"))
	if err != nil {
		return nil, err
	}
	chartRepo, err := chartFolder(images)
	if err != nil {
		return nil, err
	}
	if err := checkPins(images, charts); err != nil {
		return nil, err
	}
	opts := append([]remote.Option{remote.WithContext(ctx)}, o.Remote...)
	var out []Pushed
	report := func(p Pushed) {
		out = append(out, p)
		if o.Log != nil {
			fmt.Fprintln(o.Log, "publish:", p.String())
		}
	}
	for _, img := range images {
		pushed, err := pushImage(img, opts)
		if err != nil {
			return out, fmt.Errorf("%s: %w", img.dir, err)
		}
		report(pushed)
		for _, d := range img.referrers {
			pushed, err := pushReferrer(img, d, opts)
			if err != nil {
				return out, fmt.Errorf("%s: referrer %s: %w", img.dir, d.Digest, err)
			}
			report(pushed)
		}
		if o.Signer == nil {
			continue
		}
		signed, err := signImage(o.Signer, img, opts)
		for _, p := range signed {
			report(p)
		}
		if err != nil {
			return out, fmt.Errorf("%s: %w", img.dir, err)
		}
	}
	for _, c := range charts {
		repo, err := name.NewRepository(chartRepo+"/"+c.name, nameOptions(o)...)
		if err != nil {
			return out, err
		}
		pushed, err := pushChart(repo, c, opts)
		if err != nil {
			return out, fmt.Errorf("%s: %w", c.file, err)
		}
		report(pushed)
		if o.Signer == nil {
			continue
		}
		signed, err := signManifest(o.Signer, repo.Digest(pushed.Digest), opts)
		if err != nil {
			return out, fmt.Errorf("%s: %w", c.file, err)
		}
		report(signed)
	}
	return out, nil
}

// signImage signs the image index, then attests each provenance the
// layout attaches to it (the statement as the release holds it).
func signImage(s *sign.Signer, img image, opts []remote.Option) ([]Pushed, error) {
	subject := img.repo.Digest(img.digest.String())
	signed, err := signManifest(s, subject, opts)
	if err != nil {
		return nil, err
	}
	out := []Pushed{signed}
	for _, d := range img.referrers {
		if d.ArtifactType != images.ProvenanceMediaType {
			continue
		}
		statement, err := artifactContent(img, d)
		if err != nil {
			return out, fmt.Errorf("the provenance %s: %w", d.Digest, err)
		}
		a, err := s.Attest(subject, statement, opts...)
		if err != nil {
			return out, fmt.Errorf("attesting the provenance %s: %w", d.Digest, err)
		}
		out = append(out, attachedRecord(Attestation, a, sign.DSSEMediaType, img.digest))
	}
	return out, nil
}

// signManifest signs the manifest ref names.
func signManifest(s *sign.Signer, ref name.Digest, opts []remote.Option) (Pushed, error) {
	subject, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return Pushed{}, err
	}
	a, err := s.Sign(ref, opts...)
	if err != nil {
		return Pushed{}, fmt.Errorf("signing %s: %w", ref, err)
	}
	return attachedRecord(Signature, a, sign.SimpleSigningMediaType, subject), nil
}

func attachedRecord(kind Kind, a sign.Attached, layers types.MediaType, subject v1.Hash) Pushed {
	return Pushed{Kind: kind, Repository: a.Tag.Context().Name(), Digest: a.Digest.String(), Tag: a.Tag.TagStr(),
		MediaType: string(types.OCIManifestSchema1), ArtifactType: string(layers), Subject: subject.String(), Existed: a.Existed}
}

// artifactContent is the one layer of an artifact of the layout.
func artifactContent(img image, d v1.Descriptor) ([]byte, error) {
	a, err := img.layout.Image(d.Digest)
	if err != nil {
		return nil, err
	}
	layers, err := a.Layers()
	if err != nil {
		return nil, err
	}
	if len(layers) != 1 {
		return nil, fmt.Errorf("%d layers, not one", len(layers))
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func nameOptions(o Options) []name.Option {
	if o.Insecure {
		return []name.Option{name.Insecure}
	}
	return nil
}

// readImages reads every layout folder below dir (the archives beside
// them are the same content for `ctr images import`).
func readImages(dir string, o Options) ([]image, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w (run make release first)", err)
	}
	var out []image
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		img, err := readImage(filepath.Join(dir, e.Name()), o)
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no image layout (run make release first)", dir)
	}
	return out, nil
}

// readImage reads a layout: its one image index, named by its reference,
// and the manifests whose subject is that index. Anything else in it is
// an error: publishing only part of a layout would ship an image without
// what the release says of it.
func readImage(dir string, o Options) (image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return image{}, err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return image{}, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return image{}, err
	}
	img := image{dir: dir, layout: p}
	var others []v1.Descriptor
	for _, d := range m.Manifests {
		if !d.MediaType.IsIndex() {
			others = append(others, d)
			continue
		}
		if img.index != nil {
			return image{}, fmt.Errorf("%s holds more than one image index", dir)
		}
		ref, err := name.ParseReference(d.Annotations[refNameAnnotation], name.StrictValidation)
		if err != nil {
			return image{}, fmt.Errorf("%s: the index's %s: %w", dir, refNameAnnotation, err)
		}
		tag, ok := ref.(name.Tag)
		if !ok {
			return image{}, fmt.Errorf("%s: the index is named %s, not by a tag", dir, ref)
		}
		repo := tag.Context()
		if o.Registry != "" {
			repo, err = name.NewRepository(o.Registry+"/"+repo.RepositoryStr(), nameOptions(o)...)
		} else {
			repo, err = name.NewRepository(repo.Name(), nameOptions(o)...)
		}
		if err != nil {
			return image{}, err
		}
		img.repo, img.tag, img.digest = repo, tag.TagStr(), d.Digest
		if img.index, err = top.ImageIndex(d.Digest); err != nil {
			return image{}, err
		}
		// The layout's descriptor says the digest; the bytes must agree,
		// or the registry would serve another digest than the charts pin.
		got, err := img.index.Digest()
		if err != nil {
			return image{}, err
		}
		if got != d.Digest {
			return image{}, fmt.Errorf("%s: the index's content has the digest %s, not %s", dir, got, d.Digest)
		}
	}
	if img.index == nil {
		return image{}, fmt.Errorf("%s holds no image index", dir)
	}
	for _, d := range others {
		if d.MediaType != types.OCIManifestSchema1 {
			return image{}, fmt.Errorf("%s: %s is a %s, neither the image index nor a manifest attached to it", dir, d.Digest, d.MediaType)
		}
		a, err := top.Image(d.Digest)
		if err != nil {
			return image{}, err
		}
		am, err := a.Manifest()
		if err != nil {
			return image{}, err
		}
		if am.Subject == nil || am.Subject.Digest != img.digest {
			return image{}, fmt.Errorf("%s: the manifest %s is not attached to the image index %s", dir, d.Digest, img.digest)
		}
		if d.ArtifactType == "" {
			d.ArtifactType = am.ArtifactType
		}
		img.referrers = append(img.referrers, d)
	}
	return img, nil
}

// chartFolder is where the charts go: charts/ in the images' folder (for
// ghcr.io/gridsync/gridsync-agent, ghcr.io/gridsync/charts), so that one
// registry prefix serves the whole release.
func chartFolder(images []image) (string, error) {
	folder := ""
	for _, img := range images {
		f := path.Dir(img.repo.Name())
		if folder != "" && f != folder {
			return "", fmt.Errorf("the images are in two folders, %s and %s: the charts' is unclear", folder, f)
		}
		folder = f
	}
	return folder + "/charts", nil
}

// pushImage pushes the index by digest (its images and their blobs
// first), then tags it.
func pushImage(img image, opts []remote.Option) (Pushed, error) {
	out := Pushed{Kind: Image, Repository: img.repo.Name(), Digest: img.digest.String(), Tag: img.tag, MediaType: string(types.OCIImageIndex)}
	if mt, err := img.index.MediaType(); err == nil {
		out.MediaType = string(mt)
	}
	ref := img.repo.Digest(img.digest.String())
	existed, err := exists(ref, img.digest, opts)
	if err != nil {
		return out, err
	}
	if !existed {
		if err := remote.WriteIndex(ref, img.index, opts...); err != nil {
			return out, err
		}
		if err := check(ref, img.digest, opts); err != nil {
			return out, err
		}
	}
	tagged, err := tag(img.repo.Tag(img.tag), img.digest, img.index, opts)
	out.Existed = existed && !tagged
	return out, err
}

// pushReferrer pushes an artifact attached to the image index, by digest,
// and makes sure the index's referrers list it.
func pushReferrer(img image, d v1.Descriptor, opts []remote.Option) (Pushed, error) {
	out := Pushed{Kind: Referrer, Repository: img.repo.Name(), Digest: d.Digest.String(), MediaType: string(d.MediaType),
		ArtifactType: d.ArtifactType, Subject: img.digest.String()}
	a, err := img.layout.Image(d.Digest)
	if err != nil {
		return out, err
	}
	ref := img.repo.Digest(d.Digest.String())
	subject := img.repo.Digest(img.digest.String())
	existed, err := exists(ref, d.Digest, opts)
	if err != nil {
		return out, err
	}
	if !existed {
		// The client adds it to the subject's referrers (the fallback
		// tag where the registry has no referrers API).
		if err := remote.Write(ref, a, opts...); err != nil {
			return out, err
		}
		if err := check(ref, d.Digest, opts); err != nil {
			return out, err
		}
	}
	listed, err := referred(subject, d.Digest, opts)
	if err != nil {
		return out, err
	}
	if !listed {
		// In the registry but not listed: a run stopped between the two
		// writes. Putting the manifest again lists it.
		if err := remote.Put(ref, a, opts...); err != nil {
			return out, err
		}
		if listed, err = referred(subject, d.Digest, opts); err != nil {
			return out, err
		} else if !listed {
			return out, fmt.Errorf("the registry does not list it among the referrers of %s", img.digest)
		}
		existed = false
	}
	out.Existed = existed
	return out, nil
}

// pushChart pushes the chart's blobs, its manifest by digest, then tags it
// with the chart's version, the tag `helm pull --version` asks for.
func pushChart(repo name.Repository, c chart, opts []remote.Option) (Pushed, error) {
	h, _, err := v1.SHA256(bytes.NewReader(c.manifest))
	if err != nil {
		return Pushed{}, err
	}
	// Helm replaces the + of a version's build metadata by _ in tags.
	tagName := strings.ReplaceAll(c.version, "+", "_")
	out := Pushed{Kind: Chart, Repository: repo.Name(), Digest: h.String(), Tag: tagName, MediaType: string(types.OCIManifestSchema1)}
	ref := repo.Digest(h.String())
	m := rawManifest{raw: c.manifest, mediaType: types.OCIManifestSchema1}
	existed, err := exists(ref, h, opts)
	if err != nil {
		return out, err
	}
	if !existed {
		for _, l := range []v1.Layer{c.config, c.content} {
			if err := remote.WriteLayer(repo, l, opts...); err != nil {
				return out, err
			}
		}
		if err := remote.Put(ref, m, opts...); err != nil {
			return out, err
		}
		if err := check(ref, h, opts); err != nil {
			return out, err
		}
	}
	tagged, err := tag(repo.Tag(tagName), h, m, opts)
	out.Existed = existed && !tagged
	return out, err
}

// rawManifest is a manifest as bytes, for a PUT.
type rawManifest struct {
	raw       []byte
	mediaType types.MediaType
}

func (r rawManifest) RawManifest() ([]byte, error)        { return r.raw, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return r.mediaType, nil }

// exists says whether the registry holds the manifest ref (by digest).
func exists(ref name.Digest, want v1.Hash, opts []remote.Option) (bool, error) {
	d, err := remote.Head(ref, opts...)
	if sign.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if d.Digest != want {
		return false, fmt.Errorf("the registry answers %s for %s", d.Digest, ref)
	}
	return true, nil
}

// check fails unless the registry serves ref with the digest pushed.
func check(ref name.Reference, want v1.Hash, opts []remote.Option) error {
	d, err := remote.Head(ref, opts...)
	if err != nil {
		return fmt.Errorf("after the push: %w", err)
	}
	if d.Digest != want {
		return fmt.Errorf("pushed %s, the registry serves %s for %s", want, d.Digest, ref)
	}
	return nil
}

// tag points t at the manifest with digest want unless it does already,
// and says whether it wrote.
func tag(t name.Tag, want v1.Hash, m remote.Taggable, opts []remote.Option) (bool, error) {
	d, err := remote.Head(t, opts...)
	if err == nil && d.Digest == want {
		return false, nil
	}
	if err != nil && !sign.IsNotFound(err) {
		return false, err
	}
	if err := remote.Tag(t, m, opts...); err != nil {
		return false, err
	}
	return true, check(t, want, opts)
}

// referred says whether digest is among the referrers of subject.
func referred(subject name.Digest, digest v1.Hash, opts []remote.Option) (bool, error) {
	idx, err := remote.Referrers(subject, opts...)
	if err != nil {
		return false, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(m.Manifests, func(d v1.Descriptor) bool { return d.Digest == digest }), nil
}

// readCharts reads every packaged chart in dir.
func readCharts(dir string) ([]chart, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.tgz"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s holds no packaged chart (run make release first)", dir)
	}
	sort.Strings(files)
	var out []chart
	for _, f := range files {
		c, err := readChart(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// readChart builds the chart's OCI manifest as `helm push` would, from the
// package alone, so that the same package always gives the same digest:
// the config is Chart.yaml as JSON, the one layer the package, the
// annotations the chart's (created: when the package was made, not when
// it is pushed).
func readChart(file string) (chart, error) {
	pkg, err := os.ReadFile(file)
	if err != nil {
		return chart{}, err
	}
	files, created, err := chartFiles(pkg)
	if err != nil {
		return chart{}, err
	}
	var meta map[string]any
	if err := yaml.Unmarshal(files["Chart.yaml"], &meta); err != nil {
		return chart{}, fmt.Errorf("the chart's Chart.yaml: %w", err)
	}
	str := func(k string) string { s, _ := meta[k].(string); return s }
	c := chart{file: file, name: str("name"), version: str("version")}
	if c.name == "" || c.version == "" {
		return chart{}, errors.New("the chart's Chart.yaml names no name or version")
	}
	var values yaml.Node
	if err := yaml.Unmarshal(files["values.yaml"], &values); err != nil {
		return chart{}, fmt.Errorf("values.yaml: %w", err)
	}
	c.pins = map[string]string{}
	pinnedImages(&values, c.pins)
	config, err := json.Marshal(meta)
	if err != nil {
		return chart{}, err
	}
	c.config = static.NewLayer(config, HelmConfigMediaType)
	c.content = static.NewLayer(pkg, HelmChartMediaType)
	annotations := map[string]string{
		"org.opencontainers.image.title":   c.name,
		"org.opencontainers.image.version": c.version,
		"org.opencontainers.image.created": created.UTC().Format(time.RFC3339),
	}
	if s := str("description"); s != "" {
		annotations["org.opencontainers.image.description"] = s
	}
	if s := str("home"); s != "" {
		annotations["org.opencontainers.image.url"] = s
	}
	if sources, _ := meta["sources"].([]any); len(sources) > 0 {
		if s, ok := sources[0].(string); ok {
			annotations["org.opencontainers.image.source"] = s
		}
	}
	descriptor := func(l v1.Layer) (map[string]any, error) {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		size, err := l.Size()
		if err != nil {
			return nil, err
		}
		mt, err := l.MediaType()
		return map[string]any{"mediaType": mt, "digest": d.String(), "size": size}, err
	}
	cd, err := descriptor(c.config)
	if err != nil {
		return chart{}, err
	}
	ld, err := descriptor(c.content)
	if err != nil {
		return chart{}, err
	}
	c.manifest, err = json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     types.OCIManifestSchema1,
		"config":        cd,
		"layers":        []any{ld},
		"annotations":   annotations,
	})
	return c, err
}

// chartFiles returns the chart's top-level Chart.yaml and values.yaml from
// the package, and Chart.yaml's time in it.
func chartFiles(pkg []byte) (map[string][]byte, time.Time, error) {
	zr, err := gzip.NewReader(bytes.NewReader(pkg))
	if err != nil {
		return nil, time.Time{}, err
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	var created time.Time
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, time.Time{}, err
		}
		// The package holds <chart>/..., subcharts below <chart>/charts/.
		parts := strings.Split(hdr.Name, "/")
		if len(parts) != 2 || (parts[1] != "Chart.yaml" && parts[1] != "values.yaml") {
			continue
		}
		if files[parts[1]], err = io.ReadAll(tr); err != nil {
			return nil, time.Time{}, err
		}
		if parts[1] == "Chart.yaml" {
			created = hdr.ModTime
		}
	}
	if files["Chart.yaml"] == nil {
		return nil, time.Time{}, errors.New("no Chart.yaml in the package")
	}
	return files, created, nil
}

// pinnedImages finds every mapping of the values with a repository and a
// non-empty digest, the charts' way of naming an image by digest, and
// records the digest by the repository's last path element.
func pinnedImages(n *yaml.Node, pins map[string]string) {
	if n.Kind == yaml.MappingNode {
		var repo, digest string
		for i := 0; i+1 < len(n.Content); i += 2 {
			switch n.Content[i].Value {
			case "repository":
				repo = n.Content[i+1].Value
			case "digest":
				digest = n.Content[i+1].Value
			}
		}
		if repo != "" && digest != "" {
			pins[path.Base(repo)] = digest
		}
	}
	for _, c := range n.Content {
		pinnedImages(c, pins)
	}
}

// checkPins fails when a chart pins a digest that is not the digest of the
// release's image of that name: it would install an image the release
// does not ship.
func checkPins(images []image, charts []chart) error {
	digests := map[string]string{}
	for _, img := range images {
		digests[path.Base(img.repo.RepositoryStr())] = img.digest.String()
	}
	for _, c := range charts {
		for imageName, pinned := range c.pins {
			want, ok := digests[imageName]
			if !ok {
				return fmt.Errorf("%s pins %s@%s, an image the release does not hold", c.file, imageName, pinned)
			}
			if pinned != want {
				return fmt.Errorf("%s pins %s@%s, the release's image is %s: run make release again", c.file, imageName, pinned, want)
			}
		}
	}
	return nil
}
