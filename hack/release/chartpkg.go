package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/gridsync/gridsync/hack/images"
)

// sourceDateEpoch is $SOURCE_DATE_EPOCH (images.SourceDateEpoch), which
// the charts' files are stamped with: unset, the packages could not be
// the same bytes twice, so it is required.
func sourceDateEpoch() (time.Time, error) {
	t, set, err := images.SourceDateEpoch()
	if !set {
		return time.Time{}, errors.New("SOURCE_DATE_EPOCH is not set: the charts' files are stamped with it (make release sets the last commit's time)")
	}
	return t, err
}

// reproducibleChart writes to dst the chart package helm package wrote to
// src, so that the same chart gives the same bytes whenever it is
// packaged: helm stamps every file with the time it packages, this stamps
// each with epoch instead, sorts the files by name, fixes their mode
// (0644) and owner (root, no names), and writes the gzip stream without a
// time or name (helm's gzip comment and extra field kept).
func reproducibleChart(src, dst string, epoch time.Time) error {
	pkg, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	out, err := normalizeChart(pkg, epoch)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return os.WriteFile(dst, out, 0o644)
}

func normalizeChart(pkg []byte, epoch time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(pkg))
	if err != nil {
		return nil, err
	}
	type entry struct {
		name string
		data []byte
	}
	var entries []entry
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%s is not a regular file (type %q)", hdr.Name, hdr.Typeflag)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{hdr.Name, data})
	}
	if err := zr.Close(); err != nil {
		return nil, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	for i := 1; i < len(entries); i++ {
		if entries[i].name == entries[i-1].name {
			return nil, fmt.Errorf("%s is in the package twice", entries[i].name)
		}
	}

	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Comment, zw.Extra = zr.Comment, zr.Extra
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     e.name,
			Mode:     0o644,
			Size:     int64(len(e.data)),
			ModTime:  epoch,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
