// Package envflag gives command-line flags environment variables as
// defaults, the way both the sidecar (the upstream OVERLAY_SYNC_* names)
// and the agent (GRIDSYNC_AGENT_*) take them: a variable is applied
// before the command line, so the command line wins, and a bad value
// names both the variable and the flag.
package envflag

import (
	"flag"
	"fmt"
	"log/slog"
)

// Binding ties a flag to the environment variable that sets it.
type Binding struct {
	Flag string
	Env  string
}

// Note is the usage suffix that names a flag's variable.
func Note(env string) string { return " [$" + env + "]" }

// Parse applies each binding's variable, when set, to fs, then parses
// args, which override them. Positional arguments are refused. It returns
// flag.ErrHelp when help was asked for.
func Parse(fs *flag.FlagSet, bindings []Binding, args []string, getenv func(string) string) error {
	for _, b := range bindings {
		if v := getenv(b.Env); v != "" {
			if err := fs.Set(b.Flag, v); err != nil {
				return UsageError(fs, "invalid %s=%q for --%s: %v", b.Env, v, b.Flag, err)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return UsageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// LogLevel parses a --log-level value.
func LogLevel(fs *flag.FlagSet, value string) (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(value)); err != nil {
		return level, UsageError(fs, "--log-level: %q is not debug, info, warn or error", value)
	}
	return level, nil
}

// UsageError writes "<program>: <message>" to fs's output and returns the
// message as an error.
func UsageError(fs *flag.FlagSet, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	fmt.Fprintf(fs.Output(), "%s: %v\n", fs.Name(), err)
	return err
}
