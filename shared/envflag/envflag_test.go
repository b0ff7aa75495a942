package envflag_test

import (
	"bytes"
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envflag"
)

func newSet(out *bytes.Buffer) (*flag.FlagSet, *string, *int) {
	fs := flag.NewFlagSet("prog", flag.ContinueOnError)
	fs.SetOutput(out)
	return fs, fs.String("name", "default", ""), fs.Int("count", 1, "")
}

func TestTheCommandLineWinsOverTheEnvironment(t *testing.T) {
	var out bytes.Buffer
	fs, name, count := newSet(&out)
	env := map[string]string{"P_NAME": "from-env", "P_COUNT": "7"}
	bindings := []envflag.Binding{{Flag: "name", Env: "P_NAME"}, {Flag: "count", Env: "P_COUNT"}}
	require.NoError(t, envflag.Parse(fs, bindings, []string{"--count", "9"}, func(k string) string { return env[k] }))
	assert.Equal(t, "from-env", *name)
	assert.Equal(t, 9, *count)
}

func TestBadValuesAndArgumentsNameTheirSource(t *testing.T) {
	var out bytes.Buffer
	fs, _, _ := newSet(&out)
	bindings := []envflag.Binding{{Flag: "count", Env: "P_COUNT"}}
	err := envflag.Parse(fs, bindings, nil, func(string) string { return "many" })
	require.Error(t, err)
	assert.Contains(t, out.String(), `prog: invalid P_COUNT="many" for --count`)

	out.Reset()
	fs, _, _ = newSet(&out)
	require.Error(t, envflag.Parse(fs, nil, []string{"stray"}, func(string) string { return "" }))
	assert.Contains(t, out.String(), `unexpected argument "stray"`)

	_, err = envflag.LogLevel(fs, "loud")
	require.Error(t, err)
	assert.Contains(t, out.String(), "--log-level")
}
