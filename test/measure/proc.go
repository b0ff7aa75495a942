// Package measure holds what the benchmarks and the resource checks of
// the tests measure with: a process's CPU time and memory from /proc,
// percentiles and means, and bounded waits. One copy, so that every
// printed figure is computed the same way.
package measure

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CPU is a process's CPU time so far, summed over its threads from
// /proc/<pid>/task/*/schedstat (nanoseconds), where /proc/<pid>/stat counts
// ticks of 10 ms, too coarse for updates of about a millisecond each. A
// thread that has exited is no longer counted; the Go runtime keeps its
// threads.
func CPU(pid int) (time.Duration, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("no threads of process %d", pid)
	}
	var total time.Duration
	for _, file := range files {
		data, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread exited while the folder was read
		}
		if err != nil {
			return 0, err
		}
		fields := strings.Fields(string(data))
		if len(fields) == 0 {
			return 0, fmt.Errorf("%s: empty", file)
		}
		ns, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", file, err)
		}
		total += time.Duration(ns)
	}
	return total, nil
}

// CPUMillis is a process's CPU time so far (user and system), in
// milliseconds, from /proc/<pid>/stat: coarse (10 ms ticks) and cheap.
func CPUMillis(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses.
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) * 1000 / 100, nil // USER_HZ is 100 on Linux
}

// RSSMiB is a process's resident memory now, in MiB.
func RSSMiB(pid int) (float64, error) { return statusMiB(pid, "VmRSS:") }

// PeakRSSMiB is the high-water mark of a process's resident memory, in
// MiB.
func PeakRSSMiB(pid int) (float64, error) { return statusMiB(pid, "VmHWM:") }

func statusMiB(pid int, field string) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status %s %w", pid, field, err)
			}
			return kib / 1024, nil
		}
	}
	return 0, fmt.Errorf("no %s for %d", strings.TrimSuffix(field, ":"), pid)
}

// MustCPU, MustCPUMillis, MustRSSMiB and MustPeakRSSMiB are the figures
// above for a test or a benchmark, which fails when one cannot be read.
func MustCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	return orFail[time.Duration](tb)(CPU(pid))
}

func MustCPUMillis(tb testing.TB, pid int) float64 {
	tb.Helper()
	return orFail[float64](tb)(CPUMillis(pid))
}

func MustRSSMiB(tb testing.TB, pid int) float64 {
	tb.Helper()
	return orFail[float64](tb)(RSSMiB(pid))
}

func MustPeakRSSMiB(tb testing.TB, pid int) float64 {
	tb.Helper()
	return orFail[float64](tb)(PeakRSSMiB(pid))
}

func orFail[T any](tb testing.TB) func(T, error) T {
	return func(v T, err error) T {
		tb.Helper()
		Must(tb, err)
		return v
	}
}
