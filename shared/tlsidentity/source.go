package tlsidentity

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// dataLink is the symlink through which the kubelet publishes the current
// generation of a projected volume.
const dataLink = "..data"

// material is the raw content of one poll.
type material struct {
	cert, key, ca []byte
	// generation names the projected generation read ("" without ..data).
	generation string
}

// resolver maps a user-visible path to the file of one generation. Paths
// in the same folder resolve through the same, once-read ..data target.
type resolver struct {
	targets map[string]string // folder -> generation folder name, "" for none
}

func newResolver() *resolver { return &resolver{targets: map[string]string{}} }

func (r *resolver) resolve(path string) (string, string, error) {
	dir := filepath.Dir(path)
	gen, ok := r.targets[dir]
	if !ok {
		target, err := os.Readlink(filepath.Join(dir, dataLink))
		switch {
		case err == nil:
			gen = target
		case errors.Is(err, fs.ErrNotExist):
			gen = ""
		default:
			// ..data exists but is not a symlink: read the plain paths.
			gen = ""
		}
		r.targets[dir] = gen
	}
	if gen == "" {
		return path, "", nil
	}
	if !filepath.IsAbs(gen) {
		gen = filepath.Join(dir, gen)
	}
	return filepath.Join(gen, filepath.Base(path)), filepath.Base(gen), nil
}

// readMaterial reads cert, key and (when caPath is set) the CA bundle from
// one projected generation, each bounded by maxBytes.
func readMaterial(certPath, keyPath, caPath string, maxBytes int64) (material, *Rejection) {
	r := newResolver()
	var m material
	read := func(path string, kind Material) ([]byte, *Rejection) {
		resolved, gen, err := r.resolve(path)
		if err != nil {
			return nil, rejection(kind, ReasonMissing, err.Error())
		}
		if m.generation == "" {
			m.generation = gen
		}
		data, rej := readBounded(resolved, kind, maxBytes)
		return data, rej
	}
	var rej *Rejection
	if m.cert, rej = read(certPath, MaterialCertificate); rej != nil {
		return m, rej
	}
	if m.key, rej = read(keyPath, MaterialCertificate); rej != nil {
		return m, rej
	}
	if caPath != "" {
		if m.ca, rej = read(caPath, MaterialCABundle); rej != nil {
			return m, rej
		}
	}
	return m, nil
}

func readBounded(path string, kind Material, maxBytes int64) ([]byte, *Rejection) {
	f, err := os.Open(path)
	if err != nil {
		return nil, rejection(kind, ReasonMissing, fmt.Sprintf("open %s: %v", filepath.Base(path), err))
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, rejection(kind, ReasonUnparseable, fmt.Sprintf("read %s: %v", filepath.Base(path), err))
	}
	if int64(len(data)) > maxBytes {
		return nil, rejection(kind, ReasonOversized, fmt.Sprintf("%s is larger than %d bytes", filepath.Base(path), maxBytes))
	}
	if len(data) == 0 {
		return nil, rejection(kind, ReasonEmpty, filepath.Base(path)+" is empty")
	}
	return data, nil
}
