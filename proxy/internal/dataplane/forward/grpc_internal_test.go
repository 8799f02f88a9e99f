package forward

import (
	"net/http"
	"testing"
	"time"
)

// Tests that the proxy's statuses map to gRPC codes as gRPC's HTTP-to-gRPC mapping says, but
// for 504, which is DEADLINE_EXCEEDED (see grpcCode).
func TestGRPCCode(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]int{
		400: grpcInternal, 401: grpcUnauthenticated, 403: grpcPermissionDenied, 404: grpcUnimplemented,
		429: grpcUnavailable, 502: grpcUnavailable, 503: grpcUnavailable, 504: grpcDeadlineExceeded,
		500: grpcUnknown, 408: grpcUnknown, 413: grpcUnknown, 421: grpcUnknown,
	} {
		if got := grpcCode(status); got != want {
			t.Errorf("%d: got code %d, want %d", status, got, want)
		}
	}
}

// Tests which requests are gRPC calls: HTTP/2 with application/grpc or application/grpc+codec;
// not gRPC-Web, not HTTP/1.1, not a look-alike type.
func TestIsGRPC(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		major int
		ct    string
		want  bool
	}{
		{2, "application/grpc", true},
		{2, "application/grpc+proto", true},
		{2, "application/grpc; charset=utf-8", true},
		{2, "application/grpc-web", false},
		{2, "application/grpc-web+proto", false},
		{2, "application/grpcx", false},
		{2, "application/json", false},
		{2, "", false},
		{1, "application/grpc", false},
	} {
		r := &http.Request{ProtoMajor: tc.major, Header: http.Header{}}
		if tc.ct != "" {
			r.Header.Set("Content-Type", tc.ct)
		}
		if got := isGRPC(r); got != tc.want {
			t.Errorf("HTTP/%d %q: got %v, want %v", tc.major, tc.ct, got, tc.want)
		}
	}
}

// Tests that grpc-message values are percent-encoded as gRPC's wire format says.
func TestGRPCPercentEncode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"proxy: 404 Not Found": "proxy: 404 Not Found",
		"100%":                 "100%25",
		"é\n":                  "%C3%A9%0A",
	} {
		if got := grpcPercentEncode(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}

// Tests grpc-timeout parsing: every unit, and values that are not one.
func TestGRPCTimeout(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]time.Duration{
		"1H": time.Hour, "2M": 2 * time.Minute, "3S": 3 * time.Second, "300m": 300 * time.Millisecond,
		"5u": 5 * time.Microsecond, "99999999n": 99999999, "": -1, "m": -1, "10": -1, "1x": -1,
		"123456789S": -1, "-1S": -1, "+1S": -1,
	} {
		got, ok := grpcTimeout(v)
		if !ok {
			got = -1
		}
		if got != want {
			t.Errorf("%q: got %v, want %v", v, got, want)
		}
	}
}
