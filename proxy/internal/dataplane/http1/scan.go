package http1

import (
	"encoding/binary"
	"math/bits"
)

// Word-at-a-time scans: eight bytes are classified with a few integer operations, the high bit
// of each byte of a mask flagging the bytes of interest. A flag is exact for the lowest flagged
// byte of a word (a borrow only ever runs upwards from a flagged byte), so the first flagged
// byte is found with one count of trailing zeros.

const (
	lowBits  = 0x0101010101010101
	highBits = 0x8080808080808080
)

// below flags the bytes of w under n (n at most 0x80); bytes of 0x80 and more are not flagged.
func below(w uint64, n byte) uint64 { return (w - lowBits*uint64(n)) &^ w & highBits }

// equal flags the bytes of w that are c.
func equal(w uint64, c byte) uint64 {
	x := w ^ lowBits*uint64(c)
	return (x - lowBits) &^ x & highBits
}

// ctlMask flags the control bytes of w: below 0x20, and DEL.
func ctlMask(w uint64) uint64 { return below(w, 0x20) | equal(w, 0x7f) }

// ctlIndex returns the index of the first control byte (below 0x20, or DEL) of s, len(s) when
// there is none.
func ctlIndex(s []byte) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if m := ctlMask(binary.LittleEndian.Uint64(s[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return i
		}
	}
	return i
}

// targetMask flags the bytes of w a target may not hold as they are: controls, SP, DEL and
// obs-text, "#", and "%" (which starts an escape to check).
func targetMask(w uint64) uint64 {
	return below(w, 0x21) | equal(w, 0x7f) | w&highBits | equal(w, '#') | equal(w, '%')
}

// plainTargetPrefix returns how many bytes at the start of s, in whole words, hold no byte that
// targetMask flags.
func plainTargetPrefix(s []byte) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if m := targetMask(binary.LittleEndian.Uint64(s[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	return i
}
