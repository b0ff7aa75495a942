package main

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
)

// compressedForm shows the overlay's compressed form: the network asks for
// it, the ConfigMap holds one zstd copy instead of the two plain ones,
// and the reporting pod's sidecar reads it and keeps serving the same
// revision; then the network goes back to Auto, under which an overlay this
// small stays plain.
func compressedForm(ctx context.Context, c client.Client, sidecarHealth string) error {
	step("the overlay's compressed form: the network asks for zstd, the ConfigMap holds one compressed copy, the pod reads it")
	key := types.NamespacedName{Namespace: scope.Namespace, Name: configMapName()}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, key, &cm); err != nil {
		return err
	}
	plainBytes := len(cm.Data[envelope.DataKeyEnvelope]) + len(cm.Data[envelope.DataKeyBare])
	fmt.Printf("    ConfigMap %s: %s form, %d bytes in two copies (the pod reports it reads plain and zstd; Auto keeps an overlay under 128 KiB plain)\n",
		key.Name, envelope.FormOf(cm.Data, cm.BinaryData, envelope.DataKeyEnvelope), plainBytes)
	setEncoding := func(e v1alpha1.OverlayEncoding) error {
		n := &v1alpha1.GridNetwork{}
		n.Name = scope.Network
		patch := fmt.Sprintf(`{"spec":{"overlayEncoding":%q}}`, e)
		return c.Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	waitForm := func(form string) error {
		return waitFor(ctx, func() bool {
			return c.Get(ctx, key, &cm) == nil && envelope.FormOf(cm.Data, cm.BinaryData, envelope.DataKeyEnvelope) == form
		})
	}
	if err := setEncoding(v1alpha1.OverlayEncodingZstd); err != nil {
		return err
	}
	if err := waitForm(envelope.EncodingZstd); err != nil {
		return fmt.Errorf("the compressed form never came: %w", err)
	}
	packed := cm.BinaryData[envelope.CompressedKey(envelope.DataKeyEnvelope)]
	fmt.Printf("    kubectl patch gridnetwork %s -p '{\"spec\":{\"overlayEncoding\":\"Zstd\"}}': binaryData %s, %d bytes, no data keys\n",
		scope.Network, envelope.CompressedKey(envelope.DataKeyEnvelope), len(packed))
	var st struct {
		State           string `json:"state"`
		WrittenRevision string `json:"written_revision"`
		Source          struct {
			ResourceVersion string `json:"resource_version"`
		} `json:"source"`
	}
	if err := waitFor(ctx, func() bool {
		body, err := getBody("http://" + sidecarHealth + "/status")
		return err == nil && json.Unmarshal([]byte(body), &st) == nil && st.Source.ResourceVersion == cm.ResourceVersion
	}); err != nil {
		return fmt.Errorf("the sidecar never read the compressed ConfigMap: %w", err)
	}
	fmt.Printf("    the sidecar read resourceVersion %s: state %s, serving revision %s (the same envelope, its digest checked after decompression)\n",
		st.Source.ResourceVersion, st.State, short(st.WrittenRevision))
	if err := setEncoding(v1alpha1.OverlayEncodingAuto); err != nil {
		return err
	}
	if err := waitForm(envelope.EncodingPlain); err != nil {
		return fmt.Errorf("the plain form never came back: %w", err)
	}
	fmt.Println("    back to Auto: the plain form again")
	return nil
}
