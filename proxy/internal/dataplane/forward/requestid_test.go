package forward_test

import (
	"encoding/binary"
	"encoding/hex"
	mrand "math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
)

// Tests which client request IDs are kept: bounded, of letters, digits and "-_.:+/=" only.
func TestValidRequestID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"":                                     false,
		strings.Repeat("a", 129):               false,
		"a b":                                  false,
		"a\"b":                                 false,
		"a\\b":                                 false,
		"a,b":                                  false,
		"a\tb":                                 false,
		"a\x00b":                               false,
		"a\x7fb":                               false,
		"caf\xc3\xa9":                          false,
		"<script>":                             false,
		"a;b":                                  false,
		strings.Repeat("a", 128):               true,
		"0af76519-16cd-43dd-8448-eb211c80319c": true,
		"01ARZ3NDEKTSV4RRFFQ69G5FAV":           true,
		"dGVzdA==":                             true,
		"a+b/c_d.e:f":                          true,
	} {
		if got := forward.ValidRequestID(id); got != want {
			t.Errorf("ValidRequestID(%q) = %v, want %v", id, got, want)
		}
	}
}

// Tests that generated IDs are version 4 UUIDs, valid as client IDs, and do not repeat.
func TestNewRequestIDIsAUniqueUUID(t *testing.T) {
	t.Parallel()
	form := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := make(map[string]bool, 100000)
	for range 100000 {
		id := forward.NewRequestID()
		if !form.MatchString(id) || !forward.ValidRequestID(id) {
			t.Fatalf("generated %q", id)
		}
		if seen[id] {
			t.Fatalf("generated %q twice", id)
		}
		seen[id] = true
	}
}

func BenchmarkNewRequestID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = forward.NewRequestID()
	}
}

// BenchmarkRequestIDMathRand is the generator not chosen, for comparison: the same UUID from
// two math/rand/v2 numbers, guessable by whoever recovers the generator's state.
func BenchmarkRequestIDMathRand(b *testing.B) {
	b.ReportAllocs()
	var sink string
	for b.Loop() {
		var r [16]byte
		binary.BigEndian.PutUint64(r[:8], mrand.Uint64()) //nolint:gosec // the generator compared
		binary.BigEndian.PutUint64(r[8:], mrand.Uint64()) //nolint:gosec // the generator compared
		r[6], r[8] = r[6]&0x0f|0x40, r[8]&0x3f|0x80
		var buf [36]byte
		hex.Encode(buf[:], r[:])
		sink = string(buf[:])
	}
	_ = sink
}
