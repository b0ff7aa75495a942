package measure

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// memcgRoot is the cgroup v1 memory hierarchy (the only one these
// machines mount).
const memcgRoot = "/sys/fs/cgroup/memory"

var memcgSeq atomic.Int64

// MemoryCgroup is a memory cgroup with a limit, as the kubelet makes for a
// container with a memory limit: what a process in it charges (its
// anonymous memory, and the pages it writes to a tmpfs, which an emptyDir
// in memory is) must stay under the limit or the kernel kills it.
type MemoryCgroup struct {
	dir string
}

// NewMemoryCgroup makes a memory cgroup limited to limitBytes, removed
// when the test ends (after its processes are gone: Cleanup runs last in,
// first out, so make it before starting the process).
func NewMemoryCgroup(tb testing.TB, limitBytes int64) *MemoryCgroup {
	tb.Helper()
	dir := filepath.Join(memcgRoot, fmt.Sprintf("gridsync-test-%d-%d", os.Getpid(), memcgSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatalf("a memory cgroup is needed (root, cgroup v1 memory at %s): %v", memcgRoot, err)
	}
	tb.Cleanup(func() {
		// The processes may take a moment to leave after their exit.
		deadline := time.Now().Add(5 * time.Second)
		for os.Remove(dir) != nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limitBytes, 10)), 0o644); err != nil {
		tb.Fatalf("set the memory cgroup's limit: %v", err)
	}
	return &MemoryCgroup{dir: dir}
}

// Command wraps argv so that the process joins the cgroup before it execs:
// everything it ever allocates is charged there.
func (c *MemoryCgroup) Command(argv ...string) []string {
	return append([]string{"/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, c.dir}, argv...)
}

// PeakMiB is the most the cgroup was ever charged, in MiB.
func (c *MemoryCgroup) PeakMiB(tb testing.TB) float64 {
	tb.Helper()
	return float64(c.readInt(tb, "memory.max_usage_in_bytes")) / (1 << 20)
}

// OOMKills is how many processes of the cgroup the kernel killed for
// memory.
func (c *MemoryCgroup) OOMKills(tb testing.TB) int64 {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join(c.dir, "memory.oom_control"))
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatalf("no oom_kill count in %s/memory.oom_control", c.dir)
	return 0
}

func (c *MemoryCgroup) readInt(tb testing.TB, file string) int64 {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		tb.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
