package wellknown

import "strings"

// ReservedHeader says whether an HTTPRoute header filter may not set or add the field name:
// the fields that frame a message or describe its connection (Host, Content-Length,
// Transfer-Encoding, Connection, Upgrade, Keep-Alive, TE, Trailer and every Proxy-* field),
// which the proxy sets itself from what it forwards. A filter setting one would make a
// message say something else than its framing, or smuggle a second request past it. The
// controller refuses such a filter with a route condition, and the proxy refuses a snapshot
// that holds one.
func ReservedHeader(name string) bool {
	switch strings.ToLower(name) {
	case "host", "content-length", "transfer-encoding", "connection", "upgrade", "keep-alive", "te", "trailer":
		return true
	}
	return len(name) >= len("proxy-") && strings.EqualFold(name[:len("proxy-")], "proxy-")
}
