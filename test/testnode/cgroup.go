package testnode

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const cgroupFS = "/sys/fs/cgroup"

// hierarchies lists the mounted cgroup v1 hierarchies (cpu, memory, pids,
// the named systemd one...): the folders of /sys/fs/cgroup that hold a
// cgroup.procs and are not the v2 unified one.
func hierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		dir := filepath.Join(cgroupFS, e.Name())
		if e.Name() == "unified" {
			continue
		}
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			continue // cpu,cpuacct style links to a joint hierarchy
		}
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil {
			out = append(out, dir)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup v1 hierarchy is mounted under " + cgroupFS)
	}
	return out, nil
}

// createCgroup makes /name in every hierarchy. A new cpuset needs its CPUs
// and memory nodes before a process can join it: the parent's.
func createCgroup(name string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
				return fmt.Errorf("cgroup %s: %w", f, err)
			}
		}
	}
	return nil
}

// joinCgroup moves pid into /name of every hierarchy, so that what it
// starts (containerd's shims) stays inside and is found at teardown.
func joinCgroup(name string, pid int) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		if err := os.WriteFile(filepath.Join(h, name, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("move %d into %s: %w", pid, filepath.Join(h, name), err)
		}
	}
	return nil
}

// cgroupPIDs lists the processes of /name and its descendants in one
// hierarchy.
func cgroupPIDs(h, name string) []int {
	var pids []int
	// A cgroup that vanishes mid-walk has no processes left: errors are
	// passed over.
	_ = filepath.WalkDir(filepath.Join(h, name), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "cgroup.procs" {
			data, _ := os.ReadFile(p)
			for _, f := range bytes.Fields(data) {
				if pid, err := strconv.Atoi(string(f)); err == nil {
					pids = append(pids, pid)
				}
			}
		}
		return nil
	})
	return pids
}

// killCgroup kills every process of /name and its descendants (the
// containers, their shims, containerd) until none is left, then removes
// the cgroups, deepest first.
func killCgroup(name string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := 0
		for _, h := range hs {
			for _, pid := range cgroupPIDs(h, name) {
				left++
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: %d processes survive SIGKILL", name, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var errs []error
	for _, h := range hs {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, name), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
		for _, d := range dirs {
			// A cgroup is gone a moment after its last process.
			for try := 0; ; try++ {
				err := syscall.Rmdir(d)
				if err == nil || errors.Is(err, syscall.ENOENT) {
					break
				}
				if try == 40 {
					errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	return errors.Join(errs...)
}
