package testproc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// CPUMillis is a process's CPU time so far (user and system), in
// milliseconds, from /proc.
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

// RSSMiB is a process's resident memory, in MiB, from /proc.
func RSSMiB(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kib / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for %d", pid)
}
