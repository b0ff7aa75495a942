// Package testbin builds the project's binaries for tests that run them as
// processes, once per state of the sources, and shares them between the
// test packages of a run and between runs.
//
// A `go test ./...` runs several packages that start the agent and the
// sidecar as processes (e2e, multisite, attack, soak). Each used to build
// its own copy, at the same time as the others, which cost minutes each on
// a cold machine. Here they are built under a lock into a directory named
// by a hash of everything that goes into them: the first package builds,
// the others wait and reuse, and a later run with the same sources builds
// nothing.
//
// They are built as `make build` builds them for the images (static,
// trimmed, stripped, without the race detector): the tests hold these
// processes to the charts' memory limits and time bounds, which only the
// shipped binaries can answer for. Races in the product's code are found
// by the in-process tests, which run under -race.
package testbin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Binary is one of the project's binaries.
type Binary struct {
	// Name is its file name in the directory Dir returns.
	Name string
	// Package is its import path.
	Package string
}

// The project's binaries.
var (
	Sidecar = Binary{"gridsync-sidecar", "github.com/gridsync/gridsync/cmd/gridsync-sidecar"}
	Init    = Binary{"gridsync-init", "github.com/gridsync/gridsync/cmd/gridsync-init"}
	Agent   = Binary{"gridsync-agent", "github.com/gridsync/gridsync/cmd/gridsync-agent"}
	// Pause and StandinGateway are the node tests' pod sandbox and the
	// gateway they run in place of Praxis.
	Pause          = Binary{"gridsync-pause", "github.com/gridsync/gridsync/test/images/pause"}
	StandinGateway = Binary{"gridsync-standin-gateway", "github.com/gridsync/gridsync/test/images/standin"}
)

// all is every binary: the key covers their sources together, so that one
// directory holds one consistent set.
var all = []Binary{Sidecar, Init, Agent, Pause, StandinGateway}

// All is every binary the tests run.
func All() []Binary { return append([]Binary(nil), all...) }

// keep is how long a directory no run used stays in the cache.
const keep = 24 * time.Hour

// Dir returns a directory holding the given binaries, built from the
// current sources. GRIDSYNC_TESTBIN_CACHE
// overrides where the directories live (the user's cache directory by
// default).
func Dir(ctx context.Context, bins ...Binary) (string, error) {
	root, err := cacheRoot()
	if err != nil {
		return "", err
	}
	key, err := sourceKey(ctx)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lock(filepath.Join(root, key+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	now := time.Now()
	_ = os.Chtimes(dir, now, now) // marks it used, for pruning
	for _, b := range bins {
		out := filepath.Join(dir, b.Name)
		if _, err := os.Stat(out); err == nil {
			continue
		}
		if err := build(ctx, b, out); err != nil {
			return "", err
		}
	}
	prune(root, key)
	return dir, nil
}

// buildArgs are the go build flags and environment of `make build`.
func buildArgs() (args, env []string) {
	return []string{"-trimpath", "-ldflags", "-s -w"}, []string{"CGO_ENABLED=0"}
}

func build(ctx context.Context, b Binary, out string) error {
	args, env := buildArgs()
	tmp := out + ".tmp"
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, args...), "-o", tmp, b.Package)...)
	cmd.Env = append(os.Environ(), env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", b.Name, err, msg)
	}
	// The rename publishes a whole binary: a run killed mid-build leaves
	// a .tmp behind, never a truncated binary under the real name.
	return os.Rename(tmp, out)
}

func cacheRoot() (string, error) {
	if d := os.Getenv("GRIDSYNC_TESTBIN_CACHE"); d != "" {
		return d, os.MkdirAll(d, 0o755)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the test binaries (set GRIDSYNC_TESTBIN_CACHE): %w", err)
	}
	d := filepath.Join(base, "gridsync", "testbin")
	return d, os.MkdirAll(d, 0o755)
}

// sourceKey hashes what the binaries are built from: the Go version, the
// build flags, each dependency module's path and version, and the contents
// of every file of the packages that no module version pins (this
// module's own and any replaced by a local directory).
func sourceKey(ctx context.Context) (string, error) {
	args, env := buildArgs()
	pkgs := make([]string, 0, len(all))
	for _, b := range all {
		pkgs = append(pkgs, b.Package)
	}
	const format = `{{if not .Standard}}{{if and .Module (not .Module.Main) (not .Module.Replace)}}M {{.Module.Path}}@{{.Module.Version}}{{else}}D {{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .CgoFiles}} {{.}}{{end}}{{range .SFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{end}}{{end}}`
	list := []string{"list", "-deps", "-f", format}
	cmd := exec.CommandContext(ctx, "go", append(list, pkgs...)...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list the binaries' dependencies: %w\n%s", err, stderr.Bytes())
	}
	version, err := exec.CommandContext(ctx, "go", "env", "GOVERSION", "GOOS", "GOARCH", "GOFLAGS").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%q %q\n", version, args, env)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(h, line)
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "D" {
			continue
		}
		for _, f := range fields[2:] {
			if err := hashFile(h, filepath.Join(fields[1], f)); err != nil {
				return "", err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

func hashFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// lock takes an exclusive lock on path, waiting for another test package
// that holds it (it is building the same binaries).
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil // closing releases the lock
}

// prune removes the directories of other source states that no run used
// for a day.
func prune(root, current string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == current {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < keep {
			continue
		}
		unlock, err := lock(filepath.Join(root, e.Name()+".lock"))
		if err != nil {
			continue
		}
		_ = os.RemoveAll(filepath.Join(root, e.Name()))
		_ = os.Remove(filepath.Join(root, e.Name()+".lock"))
		unlock()
	}
}
