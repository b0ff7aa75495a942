package images

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// The annotations that name an image in an OCI layout: the OCI one, and
// containerd's, which `ctr images import` names the image by.
const (
	refNameAnnotation    = "org.opencontainers.image.ref.name"
	containerdAnnotation = "io.containerd.image.name"
)

// WriteLayout writes img into a new OCI layout folder dir, named ref.
func WriteLayout(dir string, img v1.Image, ref string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{
		refNameAnnotation:    ref,
		containerdAnnotation: ref,
	}))
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

// Write builds s from the binaries in binDir and writes its layout folder
// out/<name> and its archive out/<name>.tar, and returns its manifest
// digest.
func Write(s Spec, binDir, out, tag string) (string, error) {
	img, err := Build(s, binDir)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(out, s.Name)
	if err := WriteLayout(dir, img, s.Ref(tag)); err != nil {
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
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	return digest.String(), nil
}
