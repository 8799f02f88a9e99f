package router

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// span locates one element of a repeated message field in its parent's encoding.
type span struct{ start, end uint32 }

func (s span) of(b []byte) []byte { return b[s.start:s.end] }

// repeatedField is a repeated message field that split cuts out of its parent's encoding.
type repeatedField struct {
	number protowire.Number
	// wire holds, by field number, the wire type the parent declares each field with, -1 for
	// the numbers it does not declare or declares otherwise than split accepts.
	wire []protowire.Type
}

var (
	listenerVirtualHosts = newRepeatedField(&discoveryv1.Listener{}, "virtual_hosts")
	virtualHostRoutes    = newRepeatedField(&discoveryv1.VirtualHost{}, "routes")
)

func newRepeatedField(parent protoreflect.ProtoMessage, name protoreflect.Name) repeatedField {
	md := parent.ProtoReflect().Descriptor()
	fd := md.Fields().ByName(name)
	if fd == nil || !fd.IsList() || fd.Kind() != protoreflect.MessageKind {
		panic("router: " + string(md.FullName()) + " has no repeated message field " + string(name))
	}
	f := repeatedField{number: fd.Number()}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		for int(fd.Number()) >= len(f.wire) {
			f.wire = append(f.wire, -1)
		}
		f.wire[fd.Number()] = wireType(fd)
	}
	return f
}

// wireType returns the wire type of a field, singular or a repeated message or string, and -1
// for the others.
func wireType(fd protoreflect.FieldDescriptor) protowire.Type {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.StringKind, protoreflect.BytesKind:
		return protowire.BytesType
	case protoreflect.EnumKind, protoreflect.BoolKind, protoreflect.Int32Kind, protoreflect.Int64Kind,
		protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		if !fd.IsList() {
			return protowire.VarintType
		}
	}
	return -1
}

// declared says whether the parent declares field num with wire type typ.
func (f repeatedField) declared(num protowire.Number, typ protowire.Type) bool {
	return num > 0 && int64(num) < int64(len(f.wire)) && f.wire[num] == typ
}

// split cuts the elements of f out of the encoding b of f's parent message: it returns the
// encoding of the other fields (head) and where each element's encoding lies in b, in order.
// Decoding head and each element is then decoding b, as a message's encoding is the
// concatenation of its fields'. split reports false, and the caller decodes b whole, when b is
// malformed or holds a field the parent does not declare with that wire type (an unknown
// field, a group, a packed or repeated scalar): those are rare enough not to be worth matching
// the decoder's every rule.
//
// hint is the number of elements expected.
func split(b []byte, f repeatedField, hint int) (head []byte, spans []span, ok bool) {
	if uint64(len(b)) > 1<<32-1 {
		return nil, nil, false
	}
	spans = make([]span, 0, hint)
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 || !f.declared(num, typ) {
			return nil, nil, false
		}
		var v []byte
		m := 0
		if typ == protowire.BytesType {
			v, m = protowire.ConsumeBytes(b[off+n:])
		} else {
			_, m = protowire.ConsumeVarint(b[off+n:])
		}
		if m < 0 {
			return nil, nil, false
		}
		end := off + n + m
		if num == f.number {
			spans = append(spans, span{start: uint32(end - len(v)), end: uint32(end)})
		} else {
			head = append(head, b[off:end]...)
		}
		off = end
	}
	return head, spans, true
}

// locateRoutes records, for each virtual host, its encoding and its routes' spans in the
// listener's payload; a virtual host whose encoding split refuses gets none and is compiled
// whole the next time its listener changes.
func (l *compiledListener) locateRoutes() {
	b := l.src.GetValue()
	_, vspans, ok := split(b, listenerVirtualHosts, len(l.vhosts))
	if !ok || len(vspans) != len(l.vhosts) {
		return
	}
	for i, vh := range l.vhosts {
		src := vspans[i].of(b)
		_, spans, ok := split(src, virtualHostRoutes, len(vh.routes))
		if ok && len(spans) == len(vh.routes) {
			vh.src, vh.spans = src, spans
		}
	}
}

// rawRoute returns the encoding of route i.
func (vh *VirtualHost) rawRoute(i int) []byte { return vh.spans[i].of(vh.src) }
