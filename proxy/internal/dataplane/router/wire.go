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
	parent protoreflect.MessageDescriptor
	number protowire.Number
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
	return repeatedField{parent: md, number: fd.Number()}
}

// split cuts the elements of f out of the encoding b of f's parent message: it returns the
// encoding of the other fields (head) and where each element's encoding lies in b, in order.
// Decoding head and each element is then decoding b, as a message's encoding is the
// concatenation of its fields'. split reports false, and the caller decodes b whole, when b is
// malformed or holds a field the parent does not declare with that wire type (an unknown
// field, a group, a packed or repeated scalar): those are rare enough not to be worth matching
// the decoder's every rule.
func split(b []byte, f repeatedField) (head []byte, spans []span, ok bool) {
	if uint64(len(b)) > 1<<32-1 {
		return nil, nil, false
	}
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 || !declared(f.parent, num, typ) {
			return nil, nil, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[off+n:])
		if m < 0 {
			return nil, nil, false
		}
		end := off + n + m
		if num == f.number {
			v, _ := protowire.ConsumeBytes(b[off+n:])
			spans = append(spans, span{start: uint32(end - len(v)), end: uint32(end)})
		} else {
			head = append(head, b[off:end]...)
		}
		off = end
	}
	return head, spans, true
}

// declared says whether md declares field num, singular or a repeated message or string, with
// wire type typ.
func declared(md protoreflect.MessageDescriptor, num protowire.Number, typ protowire.Type) bool {
	fd := md.Fields().ByNumber(num)
	if fd == nil {
		return false
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.StringKind, protoreflect.BytesKind:
		return typ == protowire.BytesType
	case protoreflect.EnumKind, protoreflect.BoolKind, protoreflect.Int32Kind, protoreflect.Int64Kind,
		protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return typ == protowire.VarintType && !fd.IsList()
	}
	return false
}

// locateRoutes records, for each virtual host, its encoding and its routes' spans in the
// listener's payload; a virtual host whose encoding split refuses gets none and is compiled
// whole the next time its listener changes.
func (l *compiledListener) locateRoutes() {
	b := l.src.GetValue()
	_, vspans, ok := split(b, listenerVirtualHosts)
	if !ok || len(vspans) != len(l.vhosts) {
		return
	}
	for i, vh := range l.vhosts {
		src := vspans[i].of(b)
		_, spans, ok := split(src, virtualHostRoutes)
		if ok && len(spans) == len(vh.routes) {
			vh.src, vh.spans = src, spans
		}
	}
}

// rawRoute returns the encoding of route i.
func (vh *VirtualHost) rawRoute(i int) []byte { return vh.spans[i].of(vh.src) }
