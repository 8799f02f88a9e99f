package upstream

import (
	"bytes"
	"net/http"
	"strconv"
)

// answer follows the answer to one request in the bytes read for it: the status line and the
// framing fields of each head up to the final one and, when that head came before the request
// was written whole (an early answer), the body by its Content-Length or its chunks. It says
// where the Transport must read an end of file: right after a final head without a body (to
// HEAD, or a 204 or 304), and right after an early answer's body.
type answer struct {
	// active says the final head is still to come.
	active bool
	// head says the request is a HEAD; sent that it was written whole.
	head, sent bool
	// line holds the first bytes of the head's line being read, n counts them, and lines
	// counts the head's lines so far.
	line     [40]byte
	n, lines int
	// eol is 1 after a line feed, 2 after a line feed and a carriage return, 0 otherwise.
	eol int
	// status, length and chunked are what the head's lines said so far; length is -1 when no
	// Content-Length came.
	status  int
	length  int64
	chunked bool
	// body is the part of an early answer's body being read, bodyNone when none is followed.
	body bodyState
	// remain is what is left of a body of known length, or of a chunk's data.
	remain int64
	// size accumulates a chunk's size, digits says it has some, and sized that the size
	// ended (an extension or the line's end follows).
	size          int64
	digits, sized bool
	// blank says the trailer line being read is blank so far.
	blank bool
}

// bodyState is where in an early answer's body the bytes are.
type bodyState uint8

const (
	bodyNone bodyState = iota
	bodyLength
	chunkSize
	chunkData
	chunkDataEnd
	chunkTrailer
)

// maxChunkSize bounds a chunk size the guard follows; a larger one is given up.
const maxChunkSize = 1 << 40

// begin readies a for the answer to a request, a HEAD when head. A request without a body
// counts as written whole from the start: its head leaves in one write, and an answer to it
// cannot have left a body behind to be read as a request.
func (a *answer) begin(head, bodiless bool) {
	a.active, a.head, a.sent, a.body, a.remain = true, head, bodiless, bodyNone, 0
	a.newHead()
}

// newHead readies a for a response head.
func (a *answer) newHead() {
	a.n, a.lines, a.eol, a.status, a.length, a.chunked = 0, 0, 1, 0, -1, false
}

// scan follows b. It returns the length of b up to where the Transport must read an end of
// file, -1 for nowhere, and whether it lost track of an early answer's body (a chunk it cannot
// read), which the Transport will refuse as well.
func (a *answer) scan(b []byte) (int, bool) {
	for i := 0; i < len(b); i++ {
		switch {
		case a.body != bodyNone:
			n, end, lost := a.scanBody(b[i:])
			if end {
				return i + n, false
			}
			return -1, lost
		case !a.active:
			return -1, false
		}
		ch := b[i]
		if a.n < len(a.line) {
			a.line[a.n] = ch
			a.n++
		}
		switch {
		case ch == '\n' && a.eol > 0 && a.lines > 0:
			if a.headEnd() {
				return i + 1, false
			}
		case ch == '\n':
			a.field()
			a.n, a.eol = 0, 1
		case ch == '\r' && a.eol == 1:
			a.eol = 2
		default:
			a.eol = 0
		}
	}
	return -1, false
}

// field reads the head's line just ended: the status line, or a field that frames the body.
func (a *answer) field() {
	line := a.line[:a.n]
	a.lines++
	if a.lines == 1 {
		if len(line) >= len("HTTP/1.1 200") {
			for _, d := range line[len("HTTP/1.1 "):len("HTTP/1.1 200")] {
				a.status = a.status*10 + int(d-'0')
			}
		}
		return
	}
	name, value, ok := bytes.Cut(line, []byte(":"))
	switch {
	case !ok:
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		a.chunked = true
	case bytes.EqualFold(name, []byte("Content-Length")):
		if n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64); err == nil && n >= 0 {
			a.length = n
		}
	}
}

// headEnd ends a head and reports whether the Transport must read an end of file right after
// it. An informational head (1xx but 101) is followed by another. A final one ends the watch
// unless it came early: then its body is followed, by its chunks or its length.
func (a *answer) headEnd() bool {
	if a.status >= 100 && a.status < 200 && a.status != http.StatusSwitchingProtocols {
		a.newHead()
		return false
	}
	a.active = false
	switch {
	case a.head || a.status == http.StatusNoContent || a.status == http.StatusNotModified:
		return true
	case a.sent || a.status == http.StatusSwitchingProtocols:
		return false
	case a.chunked:
		a.body, a.size, a.digits, a.sized = chunkSize, 0, false, false
	case a.length == 0:
		return true
	case a.length > 0:
		a.body, a.remain = bodyLength, a.length
	}
	return false
}

// scanBody follows an early answer's body in b. It returns how much of b the body takes when
// it ends there, whether it does, and whether the body could not be followed.
func (a *answer) scanBody(b []byte) (n int, end, lost bool) {
	for i := 0; i < len(b); i++ {
		ch := b[i]
		switch a.body {
		case bodyLength, chunkData:
			if rest := int64(len(b) - i); rest < a.remain {
				a.remain -= rest
				return 0, false, false
			}
			i += int(a.remain) - 1 //nolint:gosec // at most what b holds
			a.remain = 0
			if a.body == bodyLength {
				a.body = bodyNone
				return i + 1, true, false
			}
			a.body = chunkDataEnd
		case chunkSize:
			switch d := hexDigit(ch); {
			case ch == '\n' && !a.digits, a.size > maxChunkSize:
				a.body = bodyNone
				return 0, false, true
			case ch == '\n' && a.size == 0:
				a.body, a.blank = chunkTrailer, true
			case ch == '\n':
				a.body, a.remain = chunkData, a.size
				a.size, a.digits, a.sized = 0, false, false
			case !a.sized && d >= 0:
				a.size, a.digits = a.size<<4|int64(d), true
			default:
				a.sized = true
			}
		case chunkDataEnd:
			if ch == '\n' {
				a.body = chunkSize
			}
		case chunkTrailer:
			switch ch {
			case '\n':
				if a.blank {
					a.body = bodyNone
					return i + 1, true, false
				}
				a.blank = true
			case '\r':
			default:
				a.blank = false
			}
		}
	}
	return 0, false, false
}

// hexDigit returns the value of the hexadecimal digit ch, -1 when it is none.
func hexDigit(ch byte) int {
	switch {
	case '0' <= ch && ch <= '9':
		return int(ch - '0')
	case 'a' <= ch && ch <= 'f':
		return int(ch-'a') + 10
	case 'A' <= ch && ch <= 'F':
		return int(ch-'A') + 10
	}
	return -1
}
