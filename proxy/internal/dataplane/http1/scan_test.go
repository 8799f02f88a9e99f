package http1

import (
	"math/rand/v2"
	"testing"
)

// The word-at-a-time scans against byte-at-a-time definitions, on every byte at every place of
// a word and on random bytes.

func naiveCtlIndex(s []byte) int {
	for i, c := range s {
		if c < 0x20 || c == 0x7f {
			return i
		}
	}
	return len(s)
}

func naivePlainTargetPrefix(s []byte) int {
	for i, c := range s[:len(s)&^7] {
		if c <= ' ' || c >= 0x7f || c == '#' || c == '%' {
			return i
		}
	}
	return len(s) &^ 7
}

// scanInputs returns 17-byte inputs of "a" with each byte value at each place, and random ones.
func scanInputs() [][]byte {
	var in [][]byte
	for c := range 256 {
		for at := range 17 {
			s := []byte("aaaaaaaaaaaaaaaaa")
			s[at] = byte(c)
			in = append(in, s)
		}
	}
	const alphabet = "aZ09-_:\r\n\t #%\x00\x7f\x80\xff~!"
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		s := make([]byte, rng.IntN(24))
		for i := range s {
			s[i] = alphabet[rng.IntN(len(alphabet))]
		}
		in = append(in, s)
	}
	return in
}

// Tests that the word-at-a-time scans find what a byte-at-a-time scan finds.
func TestScansMatchByteLoops(t *testing.T) {
	t.Parallel()
	for _, s := range scanInputs() {
		if got, want := ctlIndex(s), naiveCtlIndex(s); got != want {
			t.Fatalf("ctlIndex(%q) = %d, want %d", s, got, want)
		}
		if got, want := plainTargetPrefix(s), naivePlainTargetPrefix(s); got != want {
			t.Fatalf("plainTargetPrefix(%q) = %d, want %d", s, got, want)
		}
	}
}
