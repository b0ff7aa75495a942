package overlaysync

import (
	"bytes"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// watchOnceCodecs is the core/v1 codec with a protobuf watch path that
// copies a watch event's object once instead of three times.
//
// client-go decodes a protobuf watch frame into a metav1.WatchEvent,
// whose generated code copies the object's bytes out of the frame; then
// it decodes those bytes as a runtime.Unknown, copying them again, and
// only then unmarshals the ConfigMap, which copies each of its strings.
// With a 64 KiB envelope that is three 64 KiB allocations and copies per
// update where one is needed. Here the two wrappers are read in place
// (the frame stays valid until the event is decoded: client-go reads the
// next frame only after that) and only the ConfigMap's own unmarshalling
// copies. Everything else (lists, JSON, encoding) is the stock codec's.
type watchOnceCodecs struct {
	runtime.NegotiatedSerializer
	objects runtime.ObjectCreater
}

func (c watchOnceCodecs) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := append([]runtime.SerializerInfo(nil), c.NegotiatedSerializer.SupportedMediaTypes()...)
	for i, info := range infos {
		if info.MediaType != runtime.ContentTypeProtobuf || info.StreamSerializer == nil {
			continue
		}
		stream := *info.StreamSerializer
		stream.Serializer = watchEventSerializer{Serializer: stream.Serializer}
		infos[i].StreamSerializer = &stream
		infos[i].Serializer = embeddedObjectSerializer{Serializer: info.Serializer, objects: c.objects}
	}
	return infos
}

// watchEventSerializer reads a watch frame into a metav1.WatchEvent whose
// Object.Raw is a slice of the frame, not a copy.
type watchEventSerializer struct{ runtime.Serializer }

func (s watchEventSerializer) Decode(data []byte, gvk *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	event, ok := into.(*metav1.WatchEvent)
	if !ok {
		return s.Serializer.Decode(data, gvk, into)
	}
	*event = metav1.WatchEvent{}
	err := eachField(data, func(num protowire.Number, value []byte) error {
		switch num {
		case 1:
			event.Type = string(value)
		case 2:
			return eachField(value, func(num protowire.Number, value []byte) error {
				if num == 1 {
					event.Object.Raw = value
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("decode watch event: %w", err)
	}
	return event, gvk, nil
}

// embeddedObjectSerializer decodes a watch event's object, a protobuf
// runtime.Unknown behind the "k8s\x00" prefix, reading the wrapper in
// place. Anything it does not expect (a caller's own target object, an
// encoding or a content type set on the wrapper, a missing kind) goes to
// the stock serializer, which says what is wrong.
type embeddedObjectSerializer struct {
	runtime.Serializer
	objects runtime.ObjectCreater
}

// protobufPrefix opens every Kubernetes protobuf object.
var protobufPrefix = []byte{'k', '8', 's', 0}

func (s embeddedObjectSerializer) Decode(data []byte, gvk *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if into != nil || gvk != nil || !bytes.HasPrefix(data, protobufPrefix) {
		return s.Serializer.Decode(data, gvk, into)
	}
	var (
		typeMeta runtime.TypeMeta
		raw      []byte
		wrapped  bool // an encoding or content type other than plain protobuf
	)
	err := eachField(data[len(protobufPrefix):], func(num protowire.Number, value []byte) error {
		switch num {
		case 1:
			return eachField(value, func(num protowire.Number, value []byte) error {
				switch num {
				case 1:
					typeMeta.APIVersion = string(value)
				case 2:
					typeMeta.Kind = string(value)
				}
				return nil
			})
		case 2:
			raw = value
		case 3, 4:
			wrapped = wrapped || len(value) > 0
		}
		return nil
	})
	actual := typeMeta.GroupVersionKind()
	if err != nil || wrapped || actual.Kind == "" || actual.Version == "" {
		return s.Serializer.Decode(data, gvk, into)
	}
	obj, err := s.objects.New(actual)
	if err != nil {
		return nil, &actual, err
	}
	message, ok := obj.(interface{ Unmarshal([]byte) error })
	if !ok {
		return s.Serializer.Decode(data, gvk, into)
	}
	if err := message.Unmarshal(raw); err != nil {
		return nil, &actual, err
	}
	obj.GetObjectKind().SetGroupVersionKind(actual)
	return obj, &actual, nil
}

// eachField calls fn with every length-delimited field of a protobuf
// message (every field the wrappers above read is one) and skips the
// others.
func eachField(msg []byte, fn func(protowire.Number, []byte) error) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return protowire.ParseError(n)
		}
		msg = msg[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, msg); n < 0 {
				return protowire.ParseError(n)
			}
			msg = msg[n:]
			continue
		}
		value, n := protowire.ConsumeBytes(msg)
		if n < 0 {
			return protowire.ParseError(n)
		}
		msg = msg[n:]
		if err := fn(num, value); err != nil {
			return err
		}
	}
	return nil
}
