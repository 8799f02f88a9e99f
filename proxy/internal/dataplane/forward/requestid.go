package forward

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"net/textproto"

	"golang.org/x/net/http/httpguts"
)

// DefaultRequestIDHeader is the field that carries a request's ID to the backend.
const DefaultRequestIDHeader = "X-Request-Id"

// MaxRequestIDLength is the longest request ID a client may bring; a longer one is replaced.
const MaxRequestIDLength = 128

// CheckRequestIDHeader refuses a request ID field name that is no field name, or one the proxy
// frames, strips or sets itself (Host, Content-Length, Connection, X-Forwarded-For, ...).
func CheckRequestIDHeader(name string) error {
	canonical := textproto.CanonicalMIMEHeaderKey(name)
	switch {
	case !httpguts.ValidHeaderFieldName(name):
		return fmt.Errorf("request ID header %q is not a field name", name)
	case hopByHop[canonical] || forwardingField(canonical) || clientCertHeader(canonical):
		return fmt.Errorf("request ID header %q is a field the proxy manages", name)
	}
	return nil
}

// ValidRequestID says whether a client's request ID is kept: 1 to MaxRequestIDLength bytes of
// letters, digits and "-_.:+/=" (UUIDs, hex and base64 trace IDs, ULIDs). Nothing else gets
// through: no space, quote, backslash, comma or control byte that could split a log line or a
// header list, and no unbounded value that could swell every line that records it.
func ValidRequestID(s string) bool {
	if len(s) == 0 || len(s) > MaxRequestIDLength {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '_' || c == '.' || c == ':' || c == '+' || c == '/' || c == '=':
		default:
			return false
		}
	}
	return true
}

// requestID returns the request's ID and, when it is the client's own, the header values that
// carry it (sent on as they are); nil values ask outbound to build them. The client's ID is
// kept when it is one valid value and the options do not say to replace it; otherwise a new
// one is generated. It returns "" when request IDs are off.
func (h *Handler) requestID(r *http.Request) (string, []string) {
	if h.opts.RequestIDHeader == "" {
		return "", nil
	}
	if !h.opts.ReplaceRequestID {
		if vs := r.Header[h.opts.RequestIDHeader]; len(vs) == 1 && ValidRequestID(vs[0]) {
			return vs[0], vs
		}
	}
	return NewRequestID(), nil
}

// NewRequestID returns a random version 4 UUID (RFC 9562) in its text form, its 122 random
// bits from crypto/rand: unique (no collision to expect among 2^61 IDs) and unpredictable, so
// that no client can guess the ID of another's request. On Linux 6.11 and later crypto/rand
// reads the kernel's vDSO generator without a system call: about 100 ns an ID against 55 ns
// for math/rand/v2 (BenchmarkNewRequestID, BenchmarkRequestIDMathRand), well under a percent
// of a request, and the string is the only allocation.
func NewRequestID() string {
	var r [16]byte
	_, _ = rand.Read(r[:])  // never fails: the runtime aborts the program first
	r[6] = r[6]&0x0f | 0x40 // version 4
	r[8] = r[8]&0x3f | 0x80 // variant 10
	var b [36]byte
	j := 0
	for i, c := range r {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hexDigits[c>>4], hexDigits[c&0xf]
		j += 2
	}
	return string(b[:])
}

const hexDigits = "0123456789abcdef"
