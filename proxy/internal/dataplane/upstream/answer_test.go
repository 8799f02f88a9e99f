package upstream

import "testing"

// Tests where the guard makes the Transport read an end of file, whatever the reads' sizes:
// each answer is fed split in two at every byte, and the end must fall where the answer's
// head (no body) or its early body ends, or nowhere.
func TestAnswerEndsWhereTheTransportMustStop(t *testing.T) {
	t.Parallel()
	const chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\nA\r\n0123456789\r\n0\r\nT: v\r\n\r\n"
	for _, tc := range []struct {
		name, answer string
		head, sent   bool
		// end is where the end of file goes, -1 for nowhere.
		end int
	}{
		{"a 204 ends with its head", "HTTP/1.1 204 No Content\r\nX: 1\r\n\r\n", false, true, len("HTTP/1.1 204 No Content\r\nX: 1\r\n\r\n")},
		{"a 304 after a 103 ends with its head", "HTTP/1.1 103 Early Hints\r\nLink: <a>\r\n\r\nHTTP/1.1 304 Not Modified\r\n\r\n", false, true, len("HTTP/1.1 103 Early Hints\r\nLink: <a>\r\n\r\nHTTP/1.1 304 Not Modified\r\n\r\n")},
		{"the answer to HEAD ends with its head", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true, true, len("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n")},
		{"a 200 to a request written whole is not cut", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, true, -1},
		{"an early answer ends with its Content-Length", "HTTP/1.1 413 Too Large\r\ncontent-length: 4\r\n\r\nbig!", false, false, len("HTTP/1.1 413 Too Large\r\ncontent-length: 4\r\n\r\nbig!")},
		{"an early chunked answer ends after its trailers", chunked, false, false, len(chunked)},
		{"an early empty answer ends with its head", "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n", false, false, len("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")},
		{"a 101 is not cut", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", false, false, -1},
	} {
		for split := 1; split < len(tc.answer)+8; split++ {
			var a answer
			a.begin(tc.head, false)
			a.sent = tc.sent
			// The bytes after the answer (a later answer, or a tunnel's) must not move the end.
			b := []byte(tc.answer + "HTTP/1.1 200 OK\r\n\r\n")
			split := min(split, len(b))
			got := -1
			if end, _ := a.scan(b[:split]); end >= 0 {
				got = end
			} else if end, _ := a.scan(b[split:]); end >= 0 {
				got = split + end
			}
			if got != tc.end {
				t.Errorf("%s, split at %d: end at %d, want %d", tc.name, split, got, tc.end)
				break
			}
		}
	}
}
