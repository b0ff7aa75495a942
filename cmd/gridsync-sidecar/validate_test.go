package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

const fixtures = "../../shared/envelope/testdata/overlay-contract/v1"

func fixture(name string) string { return filepath.Join(fixtures, name) }

func TestValidateCommandExitCodes(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string // substrings, one per expected line
		stderr string
	}{
		{
			name:   "all accepted",
			args:   []string{"validate", fixture("valid-minimal.json"), fixture("valid-multi-candidate.json")},
			code:   0,
			stdout: []string{`"decision":"accept"`, `"decision":"accept"`},
		},
		{
			name:   "any rejected",
			args:   []string{"validate", fixture("valid-minimal.json"), fixture("revision-digest-disagreement.json")},
			code:   1,
			stdout: []string{`"decision":"accept"`, `"reason":"revision_digest_mismatch"`},
		},
		{
			name:   "scope flags given are checked",
			args:   []string{"validate", "--expected-network", "glb-demo", "--expected-gateway", "glb-demo-edge-gateway", "--expected-namespace", "grid-system", "--expected-local-site", "west-edge", fixture("valid-multi-candidate.json")},
			code:   1,
			stdout: []string{`"reason":"scope_mismatch"`},
		},
		{
			name:   "legacy payload needs the flag",
			args:   []string{"validate", fixture("legacy-payload.json")},
			code:   1,
			stdout: []string{`"reason":"legacy_payload"`},
		},
		{
			name:   "legacy payload accepted with the flag",
			args:   []string{"validate", "--accept-legacy", fixture("legacy-payload.json")},
			code:   0,
			stdout: []string{`"revision":"75b057d750d9db77030ecd5a073c235c56b2b0460d3d517340b3e44020e83056"`},
		},
		{
			name:   "max bytes",
			args:   []string{"validate", "--max-bytes", "100", fixture("valid-minimal.json")},
			code:   1,
			stdout: []string{`"reason":"oversized"`},
		},
		{name: "no file", args: []string{"validate"}, code: 2, stderr: "no FILE given"},
		{name: "unknown flag", args: []string{"validate", "--bogus", "x"}, code: 2, stderr: "flag provided but not defined: -bogus"},
		{name: "bad max bytes", args: []string{"validate", "--max-bytes", "0", "x"}, code: 2, stderr: "--max-bytes must be positive"},
		{name: "without a command the sidecar runs, and needs its flags", args: nil, code: 2, stderr: "--config-map is required"},
		{name: "a stray word is not a command", args: []string{"frobnicate"}, code: 2, stderr: `unexpected argument "frobnicate"`},
		{name: "help", args: []string{"validate", "-h"}, code: 0, stderr: "Exit status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, strings.NewReader(""), &stdout, &stderr)
			assert.Equal(t, tt.code, code, "stderr: %s", stderr.String())
			lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
			if len(tt.stdout) == 0 {
				assert.Empty(t, stdout.String())
			} else if assert.Len(t, lines, len(tt.stdout)) {
				for i, want := range tt.stdout {
					assert.Contains(t, lines[i], want)
				}
			}
			assert.Contains(t, stderr.String(), tt.stderr)
		})
	}
}
