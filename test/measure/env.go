package measure

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// EnvInt is the positive integer in the environment variable name, dflt
// when it is unset or not one: a benchmark's size that a bigger machine
// raises.
func EnvInt(name string, dflt int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return dflt
}

// EnvDuration is the positive duration in name, dflt when it is unset or
// not one.
func EnvDuration(name string, dflt time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return dflt
}

// EnvPercentages is the comma-separated list of percentages in name (each
// in [0, 100)), dflt when it is unset; a list that is not one panics, so
// that a mistyped run measures nothing rather than the defaults.
func EnvPercentages(name string, dflt []float64) []float64 {
	v := os.Getenv(name)
	if v == "" {
		return dflt
	}
	var out []float64
	for _, f := range strings.Split(v, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || x < 0 || x >= 100 {
			panic(fmt.Sprintf("%s: %q is not a list of percentages", name, v))
		}
		out = append(out, x)
	}
	return out
}
