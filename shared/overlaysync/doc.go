// Package overlaysync is the heart of the sidecar and the init container:
// it watches one named overlay ConfigMap through the Kubernetes API,
// validates every envelope it sees with shared/envelope, and atomically
// publishes accepted ones into the shared volume with shared/publish.
//
// Whatever goes wrong (a rejected envelope, a deleted ConfigMap, an
// unreachable API server, a full disk) the last-known-good file keeps
// serving and the Syncer reports itself degraded with a bounded reason.
// Its state feeds /readyz, /startupz, /status and the Prometheus metrics,
// which are computed from the same snapshot so that they always agree.
//
// The watch asks only for the one named object (field selector
// metadata.name), so a Role granting get/list/watch on that single
// resourceName is enough. It relists after 410 Gone, restarts a watch that
// has been silent for longer than the idle timeout (not even a bookmark),
// and backs off with jitter while the API server is unreachable; it never
// gives up.
package overlaysync
