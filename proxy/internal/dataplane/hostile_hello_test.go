package dataplane_test

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
)

// clientHello is a TLS 1.2 ClientHello record whose server_name extension holds name as it is,
// whatever bytes it has: what a hostile client writes on a raw socket.
func clientHello(name string) []byte {
	u16 := func(b []byte, v int) []byte { return binary.BigEndian.AppendUint16(b, uint16(v)) }
	var sni []byte
	sni = u16(sni, 3+len(name)) // server_name_list
	sni = append(sni, 0)        // host_name
	sni = u16(sni, len(name))
	sni = append(sni, name...)
	var ext []byte
	ext = u16(ext, 0) // server_name
	ext = u16(ext, len(sni))
	ext = append(ext, sni...)
	body := []byte{3, 3}                     // client_version TLS 1.2
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 0)                   // session_id
	body = u16(body, 2)
	body = u16(body, 0xc02f)  // TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
	body = append(body, 1, 0) // compression: null
	body = u16(body, len(ext))
	body = append(body, ext...)
	msg := []byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}
	msg = append(msg, body...)
	rec := []byte{22, 3, 1}
	rec = u16(rec, len(msg))
	return append(rec, msg...)
}

// Tests that a ClientHello whose server name holds a byte no DNS name has (a NUL, a line feed,
// a space, a control byte, a byte above ASCII), or is longer than one, is refused as soon as it
// is read and counted as a bad hello: neither routed (here to the catch-all route, whose backend
// would see the name), nor left to wait for the hello timeout; and that a well-formed name
// beside them is still routed.
func TestPassthroughRefusesServerNamesWithBadBytes(t *testing.T) {
	t.Parallel()
	a := sniBackend(t, "a")
	reg := prometheus.NewRegistry()
	const helloTimeout = 5 * time.Second
	d := start(t, dataplane.Options{Registerer: reg, Listener: listener.Options{HeaderReadTimeout: helloTimeout}})
	proxy := passthroughPort(t, d, a.Listener.Addr().String(), a.Listener.Addr().String(), a.Listener.Addr().String(), true)
	names := []string{"a.example\x00", "a\x00.example", "a.example\n", "a.exa\nmple", "a.example\r", "a example", "a.\x7fexample", "a.ex\xc3\xa4mple", "a.example\t", strings.Repeat("a", 254)}
	for i, name := range names {
		c, _ := rawConn(t, proxy)
		if _, err := c.Write(clientHello(name)); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		expectClosed(t, c, helloTimeout+time.Second)
		if took := time.Since(begin); took > helloTimeout/2 {
			t.Errorf("server name %q: closed after %s, not at once", name, took)
		}
		eventually(t, "bad_hello counted", func() bool {
			return metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "bad_hello") == float64(i+1)
		})
	}
	if got := metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "hello_timeout"); got != 0 {
		t.Errorf("hello_timeout = %v, want 0", got)
	}
	c, _ := rawConn(t, proxy)
	if got, err := getOverTLS(t, c, "a.example"); err != nil || got != "a sni=a.example" {
		t.Errorf("a well-formed name after them: %q, %v", got, err)
	}
}
