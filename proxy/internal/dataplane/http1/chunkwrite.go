package http1

import "strconv"

// The writers of a chunked body, for the server's responses and the client's requests.

// AppendChunkHeader appends the chunk-size line of a chunk of n > 0 bytes: n in hexadecimal
// and CRLF. The chunk's data follows it, then CRLF.
func AppendChunkHeader(dst []byte, n int) []byte {
	dst = strconv.AppendUint(dst, uint64(n), 16)
	return append(dst, '\r', '\n')
}

// AppendChunk appends the chunk holding p, nothing when p is empty (an empty chunk would be the
// last one).
func AppendChunk(dst, p []byte) []byte {
	if len(p) == 0 {
		return dst
	}
	dst = AppendChunkHeader(dst, len(p))
	dst = append(dst, p...)
	return append(dst, '\r', '\n')
}

// AppendLastChunk appends the last chunk, the trailer fields and the empty line that end a
// chunked body. A trailer whose name is not a token or whose value is not a field value (a
// CR, LF or other control byte, whitespace at an end) is left out: it would change the
// framing of what follows.
func AppendLastChunk(dst []byte, trailers []Field) []byte {
	dst = append(dst, '0', '\r', '\n')
	for _, f := range trailers {
		if !IsToken(f.Name) || !ValidFieldValue(f.Value) {
			continue
		}
		dst = append(dst, f.Name...)
		dst = append(dst, ':', ' ')
		dst = append(dst, f.Value...)
		dst = append(dst, '\r', '\n')
	}
	return append(dst, '\r', '\n')
}
