// Package images builds the project's container images without a container
// engine: OCI images of static binaries on a base that carries what
// gcr.io/distroless/static's nonroot image carries for them (the CA bundle,
// /etc/passwd and /etc/group naming nonroot 65532, /tmp and the home
// folders; no shell), one per platform under an image index that carries
// the OCI labels and, attached to it, an SPDX SBOM of the Go modules in
// the binaries and of the CA bundle, and their SLSA provenance; written as
// OCI layouts and as the archive `ctr images import` reads.
//
// The images are reproducible: every entry of a layer has the same owner,
// mode and time (SOURCE_DATE_EPOCH, or the Unix epoch), entries are
// sorted, gzip is deterministic, the CA bundle is made from a Go module
// at the version go.mod pins and not copied from the building machine,
// and nothing else varies (the SBOM's time and namespace come from the
// same inputs), so the same binaries give the same digests on any
// machine.
package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Registry is the registry part of every reference the images are loaded
// under. It is never contacted: the node never pulls.
const Registry = "gridsync.local"

// NonRoot is distroless's nonroot user and group, which the Dockerfiles
// name.
const NonRoot = 65532

// Spec is one image: binaries copied in on the base, the user and the
// entrypoint.
type Spec struct {
	// Name is the repository name, for example gridsync-sidecar.
	Name string
	// Binaries are the file names, in the folder given to Build, copied
	// to /usr/local/bin.
	Binaries []string
	// Entrypoint is the entrypoint; its first element names a binary.
	Entrypoint []string
}

// The shipped images, as the Dockerfiles describe them, and the two that
// only the node tests run.
var (
	Sidecar = Spec{Name: "gridsync-sidecar", Binaries: []string{"gridsync-sidecar", "gridsync-init"}, Entrypoint: []string{"/usr/local/bin/gridsync-sidecar"}}
	Agent   = Spec{Name: "gridsync-agent", Binaries: []string{"gridsync-agent"}, Entrypoint: []string{"/usr/local/bin/gridsync-agent"}}
	// Pause holds a pod's namespaces: containerd's sandbox image.
	Pause = Spec{Name: "pause", Binaries: []string{"gridsync-pause"}, Entrypoint: []string{"/usr/local/bin/gridsync-pause"}}
	// Gateway stands in for Praxis in the node tests.
	Gateway = Spec{Name: "standin-gateway", Binaries: []string{"gridsync-standin-gateway"}, Entrypoint: []string{"/usr/local/bin/gridsync-standin-gateway"}}
)

// Shipped are the images a release ships; All adds the test-only ones.
var (
	Shipped = []Spec{Sidecar, Agent}
	All     = []Spec{Sidecar, Agent, Pause, Gateway}
)

// Ref is the reference an image is loaded under.
func (s Spec) Ref(tag string) string { return Registry + "/" + s.Name + ":" + tag }

// Meta is what the labels say of a build.
type Meta struct {
	// Version is the project's version (git describe).
	Version string
	// Revision is the source's commit.
	Revision string
	// Source is the URL of the source repository.
	Source string
}

// labels are the OCI annotations of an image built from s with m, set as
// the image configs' labels and the manifests' and index's annotations.
func (m Meta) labels(s Spec, created time.Time) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":   s.Name,
		"org.opencontainers.image.created": created.Format(time.RFC3339),
	}
	for k, v := range map[string]string{"source": m.Source, "revision": m.Revision, "version": m.Version} {
		if v != "" {
			l["org.opencontainers.image."+k] = v
		}
	}
	return l
}

// Build makes the image of one architecture (linux/arch) from the
// binaries in binDir, built for it.
func Build(s Spec, binDir, arch string, m Meta) (v1.Image, error) {
	created := buildTime()
	files, err := baseFiles()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Name, err)
	}
	base, err := layer(files, created)
	if err != nil {
		return nil, fmt.Errorf("%s: base layer: %w", s.Name, err)
	}
	var bins []file
	for _, name := range s.Binaries {
		data, err := os.ReadFile(filepath.Join(binDir, name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		bins = append(bins, file{path: "usr/local/bin/" + name, mode: 0o755, data: data})
	}
	app, err := layer(bins, created)
	if err != nil {
		return nil, fmt.Errorf("%s: binaries layer: %w", s.Name, err)
	}
	user := strconv.Itoa(NonRoot) + ":" + strconv.Itoa(NonRoot)
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      v1.Time{Time: created},
		Config: v1.Config{
			Labels:     m.labels(s, created),
			User:       user,
			Entrypoint: s.Entrypoint,
			WorkingDir: "/",
			// What distroless/static sets.
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"SSL_CERT_FILE=" + caBundlePath,
			},
		},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "gridsync base: CA bundle, passwd, group, tmp"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "COPY " + path.Join(s.Binaries...) + " /usr/local/bin/"}},
	)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, m.labels(s, created)).(v1.Image), nil
}

// buildTime is SOURCE_DATE_EPOCH when set (the reproducible-builds
// convention), else the Unix epoch.
func buildTime() time.Time {
	if t, set, err := SourceDateEpoch(); set && err == nil {
		return t
	}
	return time.Unix(0, 0).UTC()
}

// SourceDateEpoch is $SOURCE_DATE_EPOCH, the time everything a release
// builds is stamped with (make release sets the last commit's); set says
// whether it is, and err that it is not a count of seconds.
func SourceDateEpoch() (t time.Time, set bool, err error) {
	s, set := os.LookupEnv("SOURCE_DATE_EPOCH")
	if !set {
		return time.Time{}, false, nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, true, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a count of seconds", s)
	}
	return time.Unix(sec, 0).UTC(), true, nil
}

// file is one entry of a layer; a path ending in / is a folder.
type file struct {
	path string
	mode int64
	uid  int
	data []byte
}

// baseFiles is the part of distroless/static's tree the binaries use, its
// CA bundle made from the pinned module (cabundle.go).
func baseFiles() ([]file, error) {
	ca, err := theCABundle()
	if err != nil {
		return nil, err
	}
	nonroot := strconv.Itoa(NonRoot)
	return []file{
		{path: "etc/", mode: 0o755},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:" + nonroot + ":\n")},
		{path: "etc/nsswitch.conf", mode: 0o644, data: []byte("passwd: files\ngroup: files\nhosts: files dns\n")},
		{path: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:" + nonroot + ":" + nonroot + ":nonroot:/home/nonroot:/sbin/nologin\n")},
		{path: "etc/ssl/", mode: 0o755},
		{path: "etc/ssl/certs/", mode: 0o755},
		{path: strings.TrimPrefix(caBundlePath, "/"), mode: 0o644, data: ca.pem},
		{path: "home/", mode: 0o755},
		{path: "home/nonroot/", mode: 0o700, uid: NonRoot},
		{path: "root/", mode: 0o700},
		{path: "tmp/", mode: 0o1777},
		{path: "usr/", mode: 0o755},
		{path: "usr/local/", mode: 0o755},
		{path: "usr/local/bin/", mode: 0o755},
	}, nil
}

// layer writes files as an uncompressed tar, sorted, every entry with the
// same time, and returns it as a gzip-compressed OCI layer.
func layer(files []file, created time.Time) (v1.Layer, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{
			Name:    f.path,
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.uid,
			ModTime: created,
			Format:  tar.FormatUSTAR,
		}
		if f.path[len(f.path)-1] == '/' {
			hdr.Typeflag = tar.TypeDir
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
