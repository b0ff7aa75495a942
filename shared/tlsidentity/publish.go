package tlsidentity

import (
	"github.com/gridsync/gridsync/shared/publish"
)

// Published file names, those of a kubernetes.io/tls Secret.
const (
	FileCert = "tls.crt"
	FileKey  = "tls.key"
	FileCA   = "ca.crt"
)

// PublishTo returns an OnChange hook that writes each identity into dir as
// one generation (see publish.Generation), so that a reader in another
// container never pairs a certificate with another generation's key. The
// mode follows the kubelet's default for Secret volumes (0644): the
// gateway container may run as another user, and only the pod's own
// containers mount the volume.
func PublishTo(dir string) func(*Identity) error { return PublishSynced(dir, true) }

// PublishSynced is PublishTo with the fsyncs only when sync is true (the
// sidecar decides it from the folder's medium, as for the overlay).
func PublishSynced(dir string, sync bool) func(*Identity) error {
	return func(id *Identity) error {
		files := map[string][]byte{FileCert: id.CertPEM, FileKey: id.KeyPEM}
		if id.CAPEM != nil {
			files[FileCA] = id.CAPEM
		}
		return publish.GenerationSynced(dir, files, 0o644, sync)
	}
}
