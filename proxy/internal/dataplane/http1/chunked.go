package http1

import (
	"bufio"
	"errors"
	"io"
)

// maxChunkLine bounds a chunk-size line, its CRLF included: net/http refuses one of 4096 bytes
// and more before its CRLF.
const maxChunkLine = 4096

// maxTrailerBytes bounds a trailer section, its final CRLF included, below MaxHeaderBytes: it is
// what net/http's server accepts (the trailer must fit in its 4 KiB read buffer).
const maxTrailerBytes = 4096

// maxChunkOverhead bounds the bytes of chunk-size lines beyond 16 per chunk and the data's size,
// as net/http does ("chunked encoding contains too much non-data"): a body of tiny chunks with
// long extensions is refused rather than parsed at length.
const maxChunkOverhead = 16 << 10

// The states of a ChunkedReader.
const (
	chunkSize    = iota // before a chunk-size line
	chunkData           // inside a chunk's data
	chunkDataEnd        // before the CRLF after a chunk's data
	chunkDone           // after the trailer section
)

// ChunkedReader decodes a chunked body (RFC 9112 section 7.1) strictly: the chunk size is
// 1*HEXDIG of at most 15 digits, chunk extensions follow their grammar, every line ends in
// CRLF, and the trailer fields are checked like header fields and bounded by the limits. A
// malformed body is an *Error (400); the connection ending inside it is io.ErrUnexpectedEOF;
// other read errors are returned as they are. A ChunkedReader is reused with Reset.
type ChunkedReader struct {
	src      *bufio.Reader
	maxCount int
	maxBytes int
	state    int
	left     int64 // data bytes left in the current chunk
	excess   int64 // chunk-line bytes beyond the allowance, as net/http counts them
	err      error
	trailers []Field
	tbuf     []byte // the trailer section's bytes, which the trailers point into
}

// Reset makes c read a chunked body from src, the limits' MaxHeaderCount and MaxHeaderBytes
// bounding its trailer section (and 4 KiB at most); lim may be nil for the defaults.
func (c *ChunkedReader) Reset(src *bufio.Reader, lim *Limits) {
	maxBytes, maxCount, _ := requestLimits(lim)
	*c = ChunkedReader{
		src: src, maxCount: maxCount, maxBytes: min(maxBytes, maxTrailerBytes),
		trailers: c.trailers[:0], tbuf: c.tbuf[:0],
	}
}

// Read reads payload bytes into p. It returns io.EOF once the last chunk and the trailer
// section have been read, and the same error again after any error.
func (c *ChunkedReader) Read(p []byte) (int, error) {
	for c.err == nil {
		switch c.state {
		case chunkSize:
			c.err = c.readSizeLine()
		case chunkData:
			if len(p) == 0 {
				return 0, nil
			}
			return c.readData(p)
		case chunkDataEnd:
			c.err = c.readDataEnd()
		case chunkDone:
			c.err = io.EOF
		}
	}
	return 0, c.err
}

// Trailers returns the trailer fields, valid after Read returned io.EOF and until Reset.
func (c *ChunkedReader) Trailers() []Field { return c.trailers }

// readData reads data of the current chunk into p.
func (c *ChunkedReader) readData(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.src.Read(p)
	c.left -= int64(n)
	if c.left == 0 {
		c.state = chunkDataEnd
	}
	switch {
	case errors.Is(err, io.EOF):
		c.err = io.ErrUnexpectedEOF
	case err != nil:
		c.err = err
	}
	if n > 0 {
		return n, nil
	}
	return 0, c.err
}

// readDataEnd reads the CRLF after a chunk's data.
func (c *ChunkedReader) readDataEnd() error {
	b, err := c.src.Peek(2)
	if len(b) == 2 {
		if b[0] != '\r' || b[1] != '\n' {
			return errChunkEnd
		}
		_, _ = c.src.Discard(2)
		c.state = chunkSize
		return nil
	}
	if len(b) == 1 && b[0] != '\r' {
		return errChunkEnd
	}
	return readError(err)
}

// readSizeLine reads a chunk-size line, and the trailer section after the last chunk's.
func (c *ChunkedReader) readSizeLine() error {
	line, err := c.src.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return errChunkLineLong
	case err != nil:
		return readError(err)
	case len(line) > maxChunkLine:
		return errChunkLineLong
	}
	size, err := parseChunkLine(line)
	if err != nil {
		return err
	}
	c.excess = max(c.excess+int64(len(line))-16-2*size, 0)
	if c.excess > maxChunkOverhead {
		return errChunkOverhead
	}
	if size > 0 {
		c.state, c.left = chunkData, size
		return nil
	}
	if err := c.readTrailers(); err != nil {
		return err
	}
	c.state = chunkDone
	return nil
}

// readError returns the error of a read that ended inside the body: io.ErrUnexpectedEOF for
// the end of the input, else err.
func readError(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
