package tlsidentity_test

import (
	"os"
	"path/filepath"
)

// writeFile replaces a plain file through a rename, as a careless
// rotation script that writes certificate and key separately would.
func writeFile(path string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
