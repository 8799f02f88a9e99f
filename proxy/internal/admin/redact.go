package admin

import (
	"bytes"
	"encoding/base64"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Redacted is what the admin port shows in place of secret material.
const Redacted = "[redacted]"

// secretWords mark a field as secret by its name: a string or bytes field whose name holds one
// is redacted, and every string and bytes field under a message field whose name holds one.
// Redacting by name rather than by a list of today's fields fails closed: a key field added to
// the protocol later is redacted before anyone thinks of it (and TestRedactedFields lists it).
var secretWords = []string{"key", "private", "secret", "token", "password", "credential"}

// publicFields hold a secret word in their name but nothing secret, each with why.
var publicFields = map[protoreflect.FullName]string{
	"coxswain.discovery.v1.Resource.key":          "a resource key is the resource's name",
	"coxswain.discovery.v1.Snapshot.removed_keys": "resource keys are the resources' names",
}

// privateKeyPEM is in the header line of every PEM private key (PKCS#1 "RSA PRIVATE KEY", SEC1
// "EC PRIVATE KEY", PKCS#8 "PRIVATE KEY" and "ENCRYPTED PRIVATE KEY", OpenSSH): a field whose
// name says nothing but holds one is redacted all the same.
var privateKeyPEM = []byte("PRIVATE KEY-----")

// redactedBytes stands in for a redacted bytes field until the JSON is written, where its
// base64 form (see redactedJSON) becomes the string Redacted: protojson writes bytes as base64,
// and a field that reads "[redacted]" says more than its base64.
var redactedBytes = []byte("\x00coxswain admin: redacted\x00")

// redactedJSON is the JSON string protojson writes for redactedBytes, and its replacement.
var (
	redactedJSON = []byte(`"` + base64.StdEncoding.EncodeToString(redactedBytes) + `"`)
	redactedText = []byte(`"` + Redacted + `"`)
)

// secretField reports whether fd's name marks it as secret.
func secretField(fd protoreflect.FieldDescriptor) bool {
	if _, ok := publicFields[fd.FullName()]; ok {
		return false
	}
	name := strings.ToLower(string(fd.Name()))
	for _, w := range secretWords {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// redact replaces, in m and every message under it (the payloads of Any fields too), the
// string and bytes values of secret fields, and any value that holds a PEM private key. With
// all, every string and bytes value goes. Unknown fields are dropped: this proxy cannot tell
// what they hold. An Any whose payload cannot be redacted is emptied. m must be a copy the
// caller owns.
func redact(m protoreflect.Message, all bool) {
	if m.Descriptor().FullName() == anyName {
		if !redactAny(m, all) {
			fields := m.Descriptor().Fields()
			for i := range fields.Len() {
				m.Clear(fields.Get(i))
			}
		}
		return
	}
	m.SetUnknown(nil)
	var fields []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		fields = append(fields, fd)
		return true
	})
	for _, fd := range fields {
		secret := all || secretField(fd)
		switch {
		case fd.IsMap():
			redactMap(m.Mutable(fd).Map(), fd.MapValue(), secret)
		case fd.IsList():
			list := m.Mutable(fd).List()
			for i := range list.Len() {
				if v, ok := redactValue(fd, list.Get(i), secret); ok {
					list.Set(i, v)
				}
			}
		case fd.Message() != nil:
			redact(m.Mutable(fd).Message(), secret)
		default:
			if v, ok := redactValue(fd, m.Get(fd), secret); ok {
				m.Set(fd, v)
			}
		}
	}
}

// redactMap redacts the values of a map field whose values are described by fd.
func redactMap(mp protoreflect.Map, fd protoreflect.FieldDescriptor, secret bool) {
	type entry struct {
		k protoreflect.MapKey
		v protoreflect.Value
	}
	var changed []entry
	mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		if nv, ok := redactValue(fd, v, secret); ok {
			changed = append(changed, entry{k, nv})
		}
		return true
	})
	for _, e := range changed {
		mp.Set(e.k, e.v)
	}
}

// redactValue returns what replaces v, a value of field fd (one element of a list or map),
// and whether it changed. Messages are redacted in place.
func redactValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, secret bool) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		redact(v.Message(), secret)
	case protoreflect.BytesKind:
		if secret || bytes.Contains(v.Bytes(), privateKeyPEM) {
			return protoreflect.ValueOfBytes(redactedBytes), true
		}
	case protoreflect.StringKind:
		if secret || strings.Contains(v.String(), string(privateKeyPEM)) {
			return protoreflect.ValueOfString(Redacted), true
		}
	default:
	}
	return v, false
}

// anyName is the type of a message that holds another.
const anyName protoreflect.FullName = "google.protobuf.Any"

// redactAny redacts the message an Any holds, in place, and reports false when it cannot: the
// type is unknown to this proxy or the bytes do not decode, and then nothing of it may be shown.
func redactAny(m protoreflect.Message, secret bool) bool {
	a, ok := m.Interface().(*anypb.Any)
	if !ok { // a dynamic message of Any's descriptor: never built here
		return false
	}
	inner, err := a.UnmarshalNew()
	if err != nil {
		return false
	}
	redact(inner.ProtoReflect(), secret)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(inner)
	if err != nil {
		return false
	}
	a.Value = b
	return true
}
