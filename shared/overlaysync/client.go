package overlaysync

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// coreScheme knows core/v1 only. The Syncer reads one ConfigMap; the full
// client-go clientset registers every API group at start-up, memory the
// sidecar has no use for (with protobuf, the switch took its RSS from
// 29.9 to 20.7 MiB in the delivery benchmark).
var (
	coreScheme     = runtime.NewScheme()
	coreCodecs     = serializer.NewCodecFactory(coreScheme)
	parameterCodec = runtime.NewParameterCodec(coreScheme)
)

func init() {
	// corev1.AddToScheme also registers the meta/v1 list and watch options.
	if err := corev1.AddToScheme(coreScheme); err != nil {
		panic(fmt.Sprintf("register core/v1: %v", err))
	}
}

// newCoreClient returns a REST client for core/v1 that speaks protobuf.
// Decoding a watch event that carries a large envelope as JSON costs
// several passes of an escaped-string scanner; as protobuf it is a copy.
//
// It speaks HTTP/1.1 to a TLS API server, not HTTP/2. A sidecar holds one
// watch at a time, so HTTP/2's multiplexing buys it nothing, while the API
// server's HTTP/2 send path (flow control and frame scheduling per stream)
// more than doubles its CPU per watcher: measured with a thousand pods on
// one API server, a 64 KiB update cost it 273 ms of CPU over HTTP/2 and
// 130 ms over HTTP/1.1, the first large update 530 and 140 ms, and each
// pod's client 94 and 67 KiB of heap. A dead connection is noticed as
// before: by the watch idle timeout and TCP keepalives rather than HTTP/2
// pings.
func newCoreClient(base *rest.Config) (rest.Interface, error) {
	cfg := rest.CopyConfig(base)
	if len(cfg.NextProtos) == 0 {
		cfg.NextProtos = []string{"http/1.1"}
	}
	cfg.APIPath = "/api"
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = watchOnceCodecs{NegotiatedSerializer: coreCodecs.WithoutConversion(), objects: coreScheme}
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("core/v1 client: %w", err)
	}
	return client, nil
}
