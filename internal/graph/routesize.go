package graph

import "reflect"

// Bounds of what protobuf adds to a value it encodes: a field's tag and length take at most
// wireFieldBytes (a tag under field number 2048 takes two bytes, a length under 32 GiB five), a
// number at most wireNumberBytes (tag and a ten-byte varint).
const (
	wireFieldBytes  = 8
	wireNumberBytes = 12
	// wireRouteBytes bounds what a compiled route holds beyond its rule's and match's values:
	// its direct status, the scheme, port and status code a redirect resolves, the fields it
	// sets from the listener, each with its tag.
	wireRouteBytes = 128
	// wireSetBytes bounds what a route set holds beyond its routes and the names counted in
	// setBytes: its resource's type URL, and the resource's and message's framing.
	wireSetBytes = 256
)

// attachmentBytes over-estimates the encoded bytes a's copies take of the snapshot of the scope
// of gw: the snapshot compiler makes one route of each (hostname, rule, match) of a on l, and
// the encoder puts the routes of each hostname in a route set of its own, as if no other route
// shared it.
func attachmentBytes(gw *Gateway, l *Listener, a *Attachment) int64 {
	body, entries := a.Route.wireBytes()
	var n int64
	for _, h := range a.Hostnames {
		n += body + entries*int64(len(h.Hostname)+wireFieldBytes) + setBytes(gw, l, h.Hostname)
	}
	return n
}

// setBytes bounds what the route set of hostname on l takes besides its routes: its key and
// its fields name the listener ("<namespace>/<gateway>/<port>"), the virtual host and the
// hostname.
func setBytes(gw *Gateway, l *Listener, hostname string) int64 {
	listener := len(gw.Source.Namespace) + len(gw.Source.Name) + 8
	return int64(2*listener + 2*len(l.QualifiedName()) + 3*len(hostname) + wireSetBytes)
}

// wireBytes returns an upper bound of the encoded bytes of the routes the snapshot compiler
// makes of r for one hostname, without the hostname, and how many routes that is (one per rule
// and match). Each route holds its name ("<id>/<rule>/<match>"), its match and its rule's
// filters, backends, timeouts and retry, which valueBytes bounds. The result is kept in r:
// a route's rules never change once built.
func (r *HTTPRoute) wireBytes() (body, entries int64) {
	if r.wire.entries > 0 {
		return r.wire.body, r.wire.entries
	}
	for _, rule := range r.Rules {
		action := valueBytes(reflect.ValueOf(rule.Filters)) + valueBytes(reflect.ValueOf(rule.Backends)) +
			valueBytes(reflect.ValueOf(rule.Timeouts)) + valueBytes(reflect.ValueOf(rule.Retry))
		for i := range rule.Matches {
			body += wireRouteBytes + int64(len(r.ID())+2*wireNumberBytes) + action + valueBytes(reflect.ValueOf(&rule.Matches[i]))
			entries++
		}
	}
	if entries == 0 { // no rule: nothing compiled, but remember that
		entries, body = -1, 0
	}
	r.wire.body, r.wire.entries = body, entries
	if entries < 0 {
		return 0, 0
	}
	return body, entries
}

// wireEstimate is what HTTPRoute.wireBytes computed: zero entries when not yet, negative when
// the route has no rule.
type wireEstimate struct{ body, entries int64 }

// valueBytes bounds the protobuf encoding of whatever a value becomes: every string, byte slice
// and nested value its own field with tag and length, every number and boolean a field of its
// own.
func valueBytes(v reflect.Value) int64 {
	switch v.Kind() {
	case reflect.String:
		return int64(wireFieldBytes + v.Len())
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return wireNumberBytes
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return 0
		}
		return valueBytes(v.Elem())
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return int64(wireFieldBytes + v.Len())
		}
		fallthrough
	case reflect.Array:
		n := int64(wireFieldBytes)
		for i := range v.Len() {
			n += valueBytes(v.Index(i))
		}
		return n
	case reflect.Map:
		n := int64(wireFieldBytes)
		for it := v.MapRange(); it.Next(); {
			n += wireFieldBytes + valueBytes(it.Key()) + valueBytes(it.Value())
		}
		return n
	case reflect.Struct:
		n := int64(wireFieldBytes)
		for i := range v.NumField() {
			n += valueBytes(v.Field(i))
		}
		return n
	}
	return wireFieldBytes
}
