package publish

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The kubelet's atomic writer layout, which readers of projected volumes
// already understand: each generation is a hidden timestamped folder,
// ..data is a symlink to the current one, and every visible name is a
// symlink through ..data. Swapping ..data with one rename switches all
// files at once for the next open: one open of a visible name always
// reads one whole file of one generation. It does not make two opens one
// generation: each open resolves ..data anew, and a swap between opening
// tls.crt and opening tls.key pairs a new certificate with the old key. A
// reader that needs several files to agree reads ..data once and opens
// them inside the generation folder it names (as tlsidentity does); a
// folder gone by then was replaced, and a new read finds the next one.
const (
	DataLink      = "..data"
	dataLinkTmp   = "..data_tmp"
	generationTag = ".."
)

// Generation publishes files (name to content) into dir as one generation,
// fsynced, and removes the generations it replaces. Names must be plain
// file names. On error the previous generation stays in place and whole.
func Generation(dir string, files map[string][]byte, perm fs.FileMode) error {
	return GenerationSynced(dir, files, perm, true)
}

// GenerationSynced is Generation with the fsyncs only when sync is true
// (see Decide): the ..data swap keeps it atomic either way.
func GenerationSynced(dir string, files map[string][]byte, perm fs.FileMode, sync bool) error {
	if len(files) == 0 {
		return errors.New("publish generation: no files")
	}
	for name := range files {
		if name == "" || strings.ContainsRune(name, os.PathSeparator) || strings.HasPrefix(name, generationTag) {
			return fmt.Errorf("publish generation: invalid file name %q", name)
		}
	}
	// The folder is created on first use: the chart points it inside the
	// pod's emptyDir, which starts empty.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("publish generation in %s: %w", dir, err)
	}
	gen, err := os.MkdirTemp(dir, generationTag+time.Now().UTC().Format("2006_01_02_15_04_05")+".")
	if err != nil {
		return fmt.Errorf("publish generation in %s: %w", dir, err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(gen)
		}
	}()
	if err := os.Chmod(gen, 0o755); err != nil {
		return fmt.Errorf("publish generation in %s: %w", dir, err)
	}
	for name, content := range files {
		if err := writeFile(filepath.Join(gen, name), content, perm, sync); err != nil {
			return fmt.Errorf("publish generation in %s: %w", dir, err)
		}
	}
	if sync {
		if err := syncDir(gen); err != nil {
			return fmt.Errorf("publish generation in %s: sync: %w", dir, err)
		}
	}

	tmpLink := filepath.Join(dir, dataLinkTmp)
	_ = os.Remove(tmpLink) // left by a crash between symlink and rename
	if err := os.Symlink(filepath.Base(gen), tmpLink); err != nil {
		return fmt.Errorf("publish generation in %s: %w", dir, err)
	}
	// The switch: one rename replaces ..data.
	if err := os.Rename(tmpLink, filepath.Join(dir, DataLink)); err != nil {
		_ = os.Remove(tmpLink)
		return fmt.Errorf("publish generation in %s: %w", dir, err)
	}
	done = true
	if sync {
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("publish generation in %s: %w: %w", dir, ErrNotDurable, err)
		}
	}

	// Visible names, created once; they resolve through ..data.
	for name := range files {
		link := filepath.Join(dir, name)
		target := filepath.Join(DataLink, name)
		if current, err := os.Readlink(link); err == nil && current == target {
			continue
		}
		if err := replaceSymlink(link, target); err != nil {
			return fmt.Errorf("publish generation in %s: %w", dir, err)
		}
	}
	return removeOldGenerations(dir, filepath.Base(gen))
}

func writeFile(path string, content []byte, perm fs.FileMode, sync bool) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(content); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		_ = f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return err
		}
	}
	return f.Close()
}

// replaceSymlink points link at target atomically (a temporary link
// renamed over it), so the name never disappears.
func replaceSymlink(link, target string) error {
	tmp := link + ".tmp-link"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}

// removeOldGenerations deletes every generation folder but the current
// one. A reader still inside an old one fails to open and retries, as with
// the kubelet: read through ..data resolved once, and read quickly.
func removeOldGenerations(dir, current string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() && strings.HasPrefix(name, generationTag) && name != current {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
