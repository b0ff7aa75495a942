// Package tlsidentity keeps a TLS identity (certificate chain, private key
// and an optional CA bundle) loaded from files that renew on their own
// schedule, typically a Secret the kubelet projects into a pod, and hands
// out only identities that pass validation.
//
// It polls (30 s by default) rather than watching the filesystem: renewals
// come hours before expiry and the kubelet projects Secret updates only on
// its sync period, so notifications would buy nothing but failure modes.
// Each poll reads all files from one projected generation (the `..data`
// symlink is resolved once), so a certificate and key from two generations
// are never paired; without `..data` a torn read fails validation and the
// next poll retries.
//
// A candidate that is missing, empty, oversized, unparseable, mismatched,
// expired or not yet valid anywhere in its chain, untrusted by the CA
// bundle, or without server-auth usage when that is required, is rejected
// and the active identity stays (last-known-good). The active identity is
// swapped atomically, so GetCertificate hands every new handshake the
// current one and leaves established connections alone.
package tlsidentity
