package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTheTableFollowsTheSchemaWithDefaultsAndComments(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"listener": map[string]any{"type": "object", "properties": map[string]any{
			"port": map[string]any{"type": "integer", "minimum": 1, "maximum": 65535},
			"name": map[string]any{"type": "string"},
		}},
		"mode":  map[string]any{"type": "string", "enum": []any{"a", "b"}, "description": "From the schema."},
		"rate":  map[string]any{"type": "number"},
		"burst": map[string]any{"type": "integer"},
		"alone": map[string]any{"type": "boolean"},
		"extra": map[string]any{"type": "string"},
	}}
	raw, err := json.Marshal(schema)
	require.NoError(t, err)
	write("values.schema.json", string(raw))
	write("values.yaml", `# -- The listener.
listener:
  port: 8080
  name: "http"
mode: a
# -- Requests per second and burst.
rate: 20
burst: 40

alone: true
extra: "x|y"
`)
	write("README.md", "# chart\n\n<!-- values:begin -->\nold\n<!-- values:end -->\ntail\n")

	changed, err := run(dir, true)
	require.NoError(t, err)
	require.True(t, changed, "check mode sees a stale table")
	changed, err = run(dir, false)
	require.NoError(t, err)
	require.True(t, changed)
	changed, err = run(dir, true)
	require.NoError(t, err)
	require.False(t, changed, "once written, the table is current")

	got, err := os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	require.Equal(t, "# chart\n\n<!-- values:begin -->\n"+
		"| key | type | default | meaning |\n|---|---|---|---|\n"+
		"| `alone` | boolean | `true` |  |\n"+ // a blank line ends the group above
		"| `burst` | integer | `40` | Requests per second and burst. |\n"+
		"| `extra` | string | `\"x\\|y\"` |  |\n"+
		"| `listener.name` | string | `\"http\"` | The listener. |\n"+
		"| `listener.port` | integer; ≥ 1; ≤ 65535 | `8080` | The listener. |\n"+
		"| `mode` | string; one of \"a\", \"b\" | `\"a\"` | From the schema. |\n"+
		"| `rate` | number | `20` | Requests per second and burst. |\n"+
		"<!-- values:end -->\ntail\n", string(got))
}
