package forward

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// gRPC status codes the proxy's own answers carry (google.golang.org/grpc/codes, by number: the
// proxy needs six numbers, not the package).
const (
	grpcUnknown          = 2
	grpcDeadlineExceeded = 4
	grpcPermissionDenied = 7
	grpcUnimplemented    = 12
	grpcInternal         = 13
	grpcUnavailable      = 14
	grpcUnauthenticated  = 16
)

// isGRPC says whether r is a gRPC call: HTTP/2 and a content type of application/grpc or
// application/grpc+<codec>. gRPC-Web (application/grpc-web...) is not: its clients read the
// HTTP status and, over HTTP/1.1, could not take a trailers-only answer the way gRPC sends it.
func isGRPC(r *http.Request) bool {
	if r.ProtoMajor != 2 {
		return false
	}
	ct := r.Header.Get("Content-Type")
	if ct, _, _ = strings.Cut(ct, ";"); !strings.HasPrefix(ct, "application/grpc") {
		return false
	}
	rest := ct[len("application/grpc"):]
	return rest == "" || rest[0] == '+'
}

// grpcCode maps the status of a local answer to a gRPC code, as gRPC's HTTP-to-gRPC status
// mapping (doc/http-grpc-status-mapping.md) does, but for 504: the proxy answers 504 when the
// route's timeout ran out, a deadline, and DEADLINE_EXCEEDED says so where UNAVAILABLE would tell
// the client the call is safe to retry though the backend may have run it.
func grpcCode(status int) int {
	switch status {
	case http.StatusBadRequest:
		return grpcInternal
	case http.StatusUnauthorized:
		return grpcUnauthenticated
	case http.StatusForbidden:
		return grpcPermissionDenied
	case http.StatusNotFound:
		return grpcUnimplemented
	case http.StatusGatewayTimeout:
		return grpcDeadlineExceeded
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable:
		return grpcUnavailable
	}
	return grpcUnknown
}

// grpcReply answers a gRPC call the proxy itself answers with code: HTTP status 200, content
// type application/grpc and no body, so that the engine sends one HEADERS frame that ends the
// stream (trailers-only) carrying grpc-status and grpc-message. status is the HTTP status the
// proxy chose, which names the message and stays the status that the access log and metrics
// see.
func (x *exchange) grpcReply(status, code int) int {
	if status >= http.StatusInternalServerError && x.grpcDeadlinePassed() {
		// The client's own deadline ran out while the proxy waited on the backend (which may
		// have reset the stream at that deadline): the call timed out, whatever broke after.
		code = grpcDeadlineExceeded
	}
	hdr := x.w.Header()
	clear(hdr)
	hdr["Content-Type"] = []string{"application/grpc"}
	hdr["Grpc-Status"] = []string{strconv.Itoa(code)}
	msg := "proxy: " + strconv.Itoa(status) + " " + http.StatusText(status)
	if x.reason != "" {
		msg += ": " + x.reason
	}
	hdr["Grpc-Message"] = []string{grpcPercentEncode(msg)}
	x.writeHeader(http.StatusOK)
	return status
}

// grpcDeadlinePassed says whether the call's grpc-timeout, counted from its arrival, is over.
func (x *exchange) grpcDeadlinePassed() bool {
	d, ok := grpcTimeout(x.r.Header.Get("Grpc-Timeout"))
	return ok && time.Since(x.start) >= d
}

// grpcTimeout parses a grpc-timeout value: at most eight digits and a unit (H, M, S, m, u, n).
func grpcTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseUint(v[:len(v)-1], 10, 64)
	if err != nil {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	return time.Duration(n) * unit, true //nolint:gosec // eight digits of hours fit an int64 of nanoseconds
}

// grpcPercentEncode encodes a grpc-message value: bytes outside printable ASCII and '%' as
// %XX (gRPC over HTTP/2, "Status-Message").
func grpcPercentEncode(s string) string {
	var b strings.Builder
	for i := range len(s) {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b.WriteByte(c)
			continue
		}
		const hex = "0123456789ABCDEF"
		b.Write([]byte{'%', hex[c>>4], hex[c&0xf]})
	}
	return b.String()
}
