package publish

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// SyncMode says when a publication is fsynced.
type SyncMode string

const (
	// SyncAuto: not inside a pod's emptyDir nor on tmpfs, where the sync
	// buys nothing (the atomic rename is what keeps readers from a torn
	// file, a process crash never loses the page cache, and after a node
	// crash the init container validates whatever the volume holds before
	// the gateway starts); everywhere else.
	SyncAuto SyncMode = "auto"
	// SyncAlways fsyncs the file and its folder on every publication.
	SyncAlways SyncMode = "always"
	// SyncNever never does.
	SyncNever SyncMode = "never"
)

// ParseSyncMode reads auto, always or never.
func ParseSyncMode(s string) (SyncMode, error) {
	switch m := SyncMode(s); m {
	case SyncAuto, SyncAlways, SyncNever:
		return m, nil
	}
	return "", fmt.Errorf("%q is not auto, always or never", s)
}

// Mediums a folder can be on.
const (
	MediumTmpfs    = "tmpfs"
	MediumEmptyDir = "emptyDir"
	MediumDisk     = "disk"
)

// Durability is what a SyncMode decided for one folder.
type Durability struct {
	Mode   SyncMode
	Medium string // tmpfs, emptyDir (disk-backed) or disk
	Sync   bool
}

// emptyDirInfix is in the path of every emptyDir volume on its node
// (/var/lib/kubelet/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>).
const emptyDirInfix = "/volumes/kubernetes.io~empty-dir/"

// Decide chooses whether publications into dir are synced, once, from its
// filesystem: statfs tells tmpfs (an emptyDir of medium Memory is one); the mount table tells a disk-backed
// emptyDir, whose mount root (or the folder's path within its filesystem)
// lies under the kubelet's empty-dir volumes.
func Decide(mode SyncMode, dir string) (Durability, error) {
	if mode == "" {
		mode = SyncAuto
	}
	d := Durability{Mode: mode, Medium: MediumDisk}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return d, fmt.Errorf("statfs %s: %w", dir, err)
	}
	switch {
	case st.Type == unix.TMPFS_MAGIC:
		d.Medium = MediumTmpfs
	case inEmptyDir(dir):
		d.Medium = MediumEmptyDir
	}
	switch mode {
	case SyncAlways:
		d.Sync = true
	case SyncAuto:
		d.Sync = d.Medium == MediumDisk
	}
	return d, nil
}

// inEmptyDir reports whether dir, as its filesystem knows it, lies in a
// kubelet emptyDir: the mount holding dir is read from /proc/self/mountinfo
// and dir's path is rebuilt from that mount's root.
func inEmptyDir(dir string) bool {
	abs, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false
	}
	within := abs
	if root, point, ok := mountOf(abs); ok {
		rel, err := filepath.Rel(point, abs)
		if err == nil {
			within = filepath.Join(root, rel)
		}
	}
	return strings.Contains(within+"/", emptyDirInfix)
}

// mountOf returns the root and mount point of the mount holding path: the
// longest mount point that is a prefix of it.
func mountOf(path string) (root, point string, ok bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", false
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mount-point options ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		r, p := UnescapeMount(fields[3]), UnescapeMount(fields[4])
		if (path == p || strings.HasPrefix(path, strings.TrimSuffix(p, "/")+"/")) && len(p) >= len(point) {
			root, point, ok = r, p, true
		}
	}
	return root, point, ok
}

// UnescapeMount undoes /proc/self/mountinfo's octal escapes (\040 for a
// space) in a root or mount point field.
func UnescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
