package runtimecfg

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMemoryLimitFromContainer(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	env := map[string]string{MemoryLimitEnv: "33554432"}
	getenv := func(k string) string { return env[k] }

	assert.Equal(t, int64(33554432*9/10), MemoryLimitFromContainer(getenv, 0), "90% of the container's 32 MiB")
	assert.Equal(t, int64(33554432*9/10-2<<20), MemoryLimitFromContainer(getenv, 2<<20), "less what the container is charged beside the process")
	assert.Equal(t, int64(33554432/2), MemoryLimitFromContainer(getenv, 30<<20), "never under half the container's")

	debug.SetMemoryLimit(math.MaxInt64)
	env["GOMEMLIMIT"] = "100MiB" // the runtime read it at start; it wins
	assert.Equal(t, int64(math.MaxInt64), MemoryLimitFromContainer(getenv, 0))

	delete(env, "GOMEMLIMIT")
	env[MemoryLimitEnv] = "not a number"
	assert.Equal(t, int64(math.MaxInt64), MemoryLimitFromContainer(getenv, 0))
}
