package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The annotations that name an image in an OCI layout: the OCI one, and
// containerd's, which `ctr images import` names the image by.
const (
	refNameAnnotation    = "org.opencontainers.image.ref.name"
	containerdAnnotation = "io.containerd.image.name"
)

// WriteLayout writes the index idx into a new OCI layout folder dir,
// named ref, and the attachments beside it, each an artifact whose subject
// is the index.
func WriteLayout(dir string, idx v1.ImageIndex, ref string, created string, attached ...attachment) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		refNameAnnotation:    ref,
		containerdAnnotation: ref,
	})); err != nil {
		return err
	}
	subject, err := partial.Descriptor(idx)
	if err != nil {
		return err
	}
	for _, a := range attached {
		manifest, err := artifactManifest(a, *subject, created)
		if err != nil {
			return err
		}
		for _, b := range [][]byte{emptyConfig, a.content, manifest} {
			h, _, err := v1.SHA256(bytes.NewReader(b))
			if err != nil {
				return err
			}
			if err := p.WriteBlob(h, blob(b)); err != nil {
				return err
			}
		}
		h, size, err := v1.SHA256(bytes.NewReader(manifest))
		if err != nil {
			return err
		}
		if err := p.AppendDescriptor(v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: size, Digest: h, ArtifactType: a.mediaType}); err != nil {
			return err
		}
	}
	return nil
}

// WriteArchive writes the OCI layout folder dir as the tar archive that
// `ctr images import` reads, its entries sorted.
func WriteArchive(dir string, w io.Writer) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data)), ModTime: buildTime(), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("archive %s: %w", rel, err)
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// Write builds s for the architectures in bins (architecture → the folder
// of its binaries) and writes its layout folder out/<name>, naming the
// image ref, and its archive out/<name>.tar, and returns the index's
// digest.
func Write(s Spec, bins map[string]string, out, ref string, m Meta) (string, error) {
	idx, sbom, err := Index(s, bins, m)
	if err != nil {
		return "", err
	}
	digest, err := idx.Digest()
	if err != nil {
		return "", err
	}
	archs := make([]string, 0, len(bins))
	for arch := range bins {
		archs = append(archs, "linux/"+arch)
	}
	sort.Strings(archs)
	repository := ref // the reference without its tag (a registry's port kept)
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repository = ref[:i]
	}
	provenance, err := Provenance(repository, digest, m, archs)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(out, s.Name)
	err = WriteLayout(dir, idx, ref, m.labels(s, buildTime())["org.opencontainers.image.created"],
		attachment{mediaType: SBOMMediaType, title: s.Name + ".spdx.json", content: sbom},
		attachment{mediaType: ProvenanceMediaType, title: s.Name + ".provenance.json", content: provenance})
	if err != nil {
		return "", fmt.Errorf("%s: layout: %w", s.Name, err)
	}
	f, err := os.Create(dir + ".tar")
	if err != nil {
		return "", err
	}
	if err := WriteArchive(dir, f); err != nil {
		_ = f.Close()
		return "", fmt.Errorf("%s: archive: %w", s.Name, err)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return digest.String(), nil
}
