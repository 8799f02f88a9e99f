package wellknown

import "testing"

// Tests which header names a filter may not set: the framing and connection fields in any
// case, and every Proxy-* field, but not names that only start like them.
func TestReservedHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"Host": true, "content-length": true, "Transfer-Encoding": true, "CONNECTION": true, "Upgrade": true,
		"Keep-Alive": true, "TE": true, "Trailer": true, "Proxy-Authorization": true, "proxy-connection": true,
		"Hostname": false, "X-Host": false, "Trailers": false, "Proxy": false, "X-Proxy-Id": false, "Content-Type": false,
	} {
		if got := ReservedHeader(name); got != want {
			t.Errorf("ReservedHeader(%q) = %t, want %t", name, got, want)
		}
	}
}
