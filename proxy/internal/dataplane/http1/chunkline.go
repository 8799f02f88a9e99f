package http1

import (
	"bufio"
	"bytes"
	"errors"
)

// maxChunkSizeDigits bounds a chunk size's hexadecimal digits: 15 digits cannot overflow an
// int64, even doubled.
const maxChunkSizeDigits = 15

// parseChunkLine parses a chunk-size line, its CRLF included: chunk-size [ chunk-ext ] CRLF
// (RFC 9112 section 7.1). The extensions are checked and ignored.
func parseChunkLine(line []byte) (int64, error) {
	n := len(line)
	if n < 2 || line[n-2] != '\r' {
		return 0, errBareLF
	}
	line = line[:n-2]
	if bytes.IndexByte(line, '\r') >= 0 {
		return 0, errBareCR
	}
	var size int64
	i := 0
	for ; i < len(line) && isHex(line[i]); i++ {
		if i == maxChunkSizeDigits {
			return 0, errChunkSizeOverflow
		}
		size = size<<4 | int64(unhex(line[i]))
	}
	switch {
	case i == 0:
		return 0, errChunkSize
	case i < len(line) && line[i] != ';':
		return 0, errChunkSize
	}
	if !validChunkExtensions(line[i:]) {
		return 0, errChunkExtension
	}
	return size, nil
}

// validChunkExtensions reports whether e is *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS
// chunk-ext-val ] ), the value a token or a quoted-string.
func validChunkExtensions(e []byte) bool {
	for {
		e = skipOWS(e)
		if len(e) == 0 {
			return true
		}
		if e[0] != ';' {
			return false
		}
		e = skipOWS(e[1:])
		name := tokenPrefix(e)
		if name == 0 {
			return false
		}
		e = skipOWS(e[name:])
		if len(e) == 0 || e[0] != '=' {
			continue
		}
		e = skipOWS(e[1:])
		n := tokenPrefix(e)
		if n == 0 {
			n = quotedStringPrefix(e)
		}
		if n == 0 {
			return false
		}
		e = e[n:]
	}
}

// skipOWS returns b without its leading SP and HTAB.
func skipOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// tokenPrefix returns the length of the token at the start of b.
func tokenPrefix(b []byte) int {
	i := 0
	for i < len(b) && tchar[b[i]] {
		i++
	}
	return i
}

// quotedStringPrefix returns the length of the quoted-string at the start of b (RFC 9110
// section 5.6.4), 0 when there is none.
func quotedStringPrefix(b []byte) int {
	if len(b) == 0 || b[0] != '"' {
		return 0
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i++; i == len(b) || !vchar[b[i]] {
				return 0
			}
		case !vchar[c]:
			return 0
		}
	}
	return 0
}

// unhex returns the value of the hexadecimal digit c.
func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// readTrailers reads the trailer section after the last chunk into c.trailers: field lines
// checked like a head's, bounded by c.maxBytes and c.maxCount, up to an empty line.
func (c *ChunkedReader) readTrailers() error {
	for {
		start := len(c.tbuf)
		if err := c.readTrailerLine(); err != nil {
			return err
		}
		line := c.tbuf[start:]
		if len(line) < 2 || line[len(line)-2] != '\r' {
			return errBareLF
		}
		if len(line) == 2 {
			return nil
		}
		if len(c.trailers) == c.maxCount {
			return errTrailerTooMany
		}
		c.trailers = append(c.trailers, Field{})
		if _, err := parseField(line, 0, &c.trailers[len(c.trailers)-1]); err != nil {
			return err
		}
	}
}

// readTrailerLine appends the next line of the trailer section, its LF included, to c.tbuf.
// The trailers already parsed keep pointing into the array they were parsed from when c.tbuf
// grows, which is never written again.
func (c *ChunkedReader) readTrailerLine() error {
	for {
		part, err := c.src.ReadSlice('\n')
		if len(c.tbuf)+len(part) > c.maxBytes {
			return errTrailerTooLarge
		}
		c.tbuf = append(c.tbuf, part...)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return readError(err)
		}
	}
}
