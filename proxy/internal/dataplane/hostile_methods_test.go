package dataplane_test

import (
	"testing"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// Tests that a method with a lower-case letter is refused with 400 before routing, over
// HTTP/1.1 and HTTP/2: methods are case-sensitive (RFC 9110 9.1), so `delete` would miss a
// route that answers DELETE with 403, and `trace` and `connect` the proxy's own 405, and reach
// a backend whose framework upper-cases the method and runs DELETE, TRACE or CONNECT.
func TestMethodWithLowerCaseIsRefused(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, answerEach)
	d := start(t, dataplane.Options{})
	deny := &discoveryv1.Route{Name: "ns/deny/0/0", Match: snaptest.Prefix("/"), DirectStatus: 403}
	deny.Match.Method = "DELETE"
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", deny,
		snaptest.Route("ns/r/0/0", "", snaptest.Prefix("/"), "ns/app:80"))),
		snaptest.Cluster(t, "ns/app:80", be.addr()))
	proxy := addr(t, d, 80)
	for _, tc := range []struct {
		method string
		status int
	}{
		{"DELETE", 403},
		{"delete", 400},
		{"Delete", 400},
		{"trace", 400},
		{"connect", 400},
		{"Get", 400},
		{"get", 400},
		{"TRACE", 405},
		{"GET", 200},
		{"M-SEARCH", 200},
	} {
		t.Run("HTTP/1.1 "+tc.method, func(t *testing.T) {
			c, br := rawConn(t, proxy)
			resp, _ := roundTrip(t, c, br, tc.method+" /item/1 HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp.StatusCode != tc.status {
				t.Errorf("got %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
	h := dialH2(t, proxy)
	id := uint32(1)
	for _, tc := range []struct {
		method string
		status int
	}{
		{"DELETE", 403},
		{"delete", 400},
		{"trace", 400},
		{"connect", 400},
		{"Get", 400},
		{"GET", 200},
	} {
		h.request(id, true, ":method", tc.method, ":scheme", "http", ":authority", "x", ":path", "/item/1")
		if got := h.await(id); got.status != tc.status {
			t.Errorf("HTTP/2 %s: got %d (reset %v), want %d", tc.method, got.status, got.reset, tc.status)
		}
		id += 2
	}
	for _, r := range be.requests() {
		if r.Method != "GET" && r.Method != "M-SEARCH" {
			t.Errorf("backend received %s %s", r.Method, r.RequestURI)
		}
	}
}
