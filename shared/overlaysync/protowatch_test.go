package overlaysync

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"
)

func protobufInfo(t *testing.T, codecs runtime.NegotiatedSerializer) runtime.SerializerInfo {
	t.Helper()
	for _, info := range codecs.SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeProtobuf {
			return info
		}
	}
	t.Fatal("no protobuf serializer")
	return runtime.SerializerInfo{}
}

// watchStream encodes events as the API server sends them on a protobuf
// watch: each a length-delimited metav1.WatchEvent whose object is a
// prefixed runtime.Unknown.
func watchStream(t *testing.T, events ...watch.Event) []byte {
	t.Helper()
	info := protobufInfo(t, coreCodecs.WithoutConversion())
	encoder := coreCodecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	var stream bytes.Buffer
	frames := info.StreamSerializer.NewFrameWriter(&stream)
	for _, ev := range events {
		var object bytes.Buffer
		require.NoError(t, encoder.Encode(ev.Object, &object))
		var frame bytes.Buffer
		require.NoError(t, info.StreamSerializer.Encode(&metav1.WatchEvent{
			Type: string(ev.Type), Object: runtime.RawExtension{Raw: object.Bytes()},
		}, &frame))
		_, err := frames.Write(frame.Bytes())
		require.NoError(t, err)
	}
	return stream.Bytes()
}

// decodeAll reads every event of stream with the codecs' protobuf watch
// path, as client-go's Request.Watch puts it together.
func decodeAll(t *testing.T, codecs runtime.NegotiatedSerializer, stream []byte) ([]watch.Event, error) {
	t.Helper()
	info := protobufInfo(t, codecs)
	frames := info.StreamSerializer.NewFrameReader(io.NopCloser(bytes.NewReader(stream)))
	decoder := restclientwatch.NewDecoder(
		streaming.NewDecoder(frames, info.StreamSerializer.Serializer),
		codecs.DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion))
	var events []watch.Event
	for {
		typ, obj, err := decoder.Decode()
		if errors.Is(err, io.EOF) {
			return events, nil
		}
		if err != nil {
			return events, err
		}
		events = append(events, watch.Event{Type: typ, Object: obj})
	}
}

// Every kind of event a ConfigMap watch receives decodes to exactly what
// the stock codec makes of it.
func TestWatchOnceCodecsDecodeAsTheStockCodec(t *testing.T) {
	envelope := strings.Repeat(`{"candidates":[]}`, 4096) // well past one read buffer
	stream := watchStream(t,
		watch.Event{Type: watch.Added, Object: &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "grid-overlay-a-b", Namespace: "ns", ResourceVersion: "7", Labels: map[string]string{"k": "v"}},
			Data:       map[string]string{"envelope.json": envelope, "other": "x"},
		}},
		watch.Event{Type: watch.Modified, Object: &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "grid-overlay-a-b", Namespace: "ns", ResourceVersion: "8"},
			Data:       map[string]string{"envelope.json": envelope + " "},
			BinaryData: map[string][]byte{"bin": {0, 1, 2}},
		}},
		watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}},
		}},
		watch.Event{Type: watch.Deleted, Object: &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "grid-overlay-a-b", Namespace: "ns", ResourceVersion: "10"},
		}},
		watch.Event{Type: watch.Error, Object: &metav1.Status{
			Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version: 1 (10)",
		}},
	)
	want, err := decodeAll(t, coreCodecs.WithoutConversion(), stream)
	require.NoError(t, err)
	require.Len(t, want, 5)
	got, err := decodeAll(t, watchOnceCodecs{NegotiatedSerializer: coreCodecs.WithoutConversion(), objects: coreScheme}, stream)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, envelope, got[0].Object.(*corev1.ConfigMap).Data["envelope.json"])
	assert.Equal(t, int32(410), got[4].Object.(*metav1.Status).Code)
}

// A frame cut short or corrupted is an error, never a panic or an event
// that the stock codec would not have produced.
func TestWatchOnceCodecsRefuseBrokenFrames(t *testing.T) {
	stream := watchStream(t, watch.Event{Type: watch.Added, Object: &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "c", ResourceVersion: "1"}, Data: map[string]string{"k": "v"},
	}})
	ours := watchOnceCodecs{NegotiatedSerializer: coreCodecs.WithoutConversion(), objects: coreScheme}
	for cut := 5; cut < len(stream); cut++ {
		broken := append([]byte(nil), stream...)
		broken[cut] ^= 0xff
		got, err := decodeAll(t, ours, broken)
		if err == nil {
			// A flipped byte inside a string still decodes; it must then
			// decode as the stock codec decodes it.
			want, wantErr := decodeAll(t, coreCodecs.WithoutConversion(), broken)
			require.NoError(t, wantErr, "byte %d: the stock codec refused what this one accepted", cut)
			assert.Equal(t, want, got, "byte %d", cut)
		}
		_, _ = decodeAll(t, ours, stream[:cut])
	}
}

// refusingSerializer stands for the stock codec where a test proves that
// it was not asked.
type refusingSerializer struct{ runtime.Serializer }

func (refusingSerializer) Decode([]byte, *schema.GroupVersionKind, runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	return nil, nil, errors.New("the stock codec was asked")
}

// The fast path is the one taken for a ConfigMap event: the event's
// object is a slice of the frame and the wrapper is read without the
// stock codec.
func TestWatchOnceCodecsReadTheWrappersInPlace(t *testing.T) {
	info := protobufInfo(t, coreCodecs.WithoutConversion())
	var object bytes.Buffer
	require.NoError(t, coreCodecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion).Encode(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "c", ResourceVersion: "3"}, Data: map[string]string{"k": "v"},
	}, &object))
	var frame bytes.Buffer
	require.NoError(t, info.StreamSerializer.Encode(&metav1.WatchEvent{
		Type: string(watch.Modified), Object: runtime.RawExtension{Raw: object.Bytes()},
	}, &frame))

	var event metav1.WatchEvent
	_, _, err := watchEventSerializer{refusingSerializer{}}.Decode(frame.Bytes(), nil, &event)
	require.NoError(t, err)
	assert.Equal(t, string(watch.Modified), event.Type)
	assert.Equal(t, object.Bytes(), event.Object.Raw)
	start := uintptr(unsafe.Pointer(&frame.Bytes()[0]))
	at := uintptr(unsafe.Pointer(&event.Object.Raw[0]))
	assert.True(t, at > start && at < start+uintptr(frame.Len()), "the object is a slice of the frame")

	obj, _, err := embeddedObjectSerializer{Serializer: refusingSerializer{}, objects: coreScheme}.Decode(event.Object.Raw, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, "3", obj.(*corev1.ConfigMap).ResourceVersion)
	assert.Equal(t, "v", obj.(*corev1.ConfigMap).Data["k"])
}
