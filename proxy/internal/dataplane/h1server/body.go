package h1server

import (
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"sync"
	"sync/atomic"
	"time"
)

// body is a request's body as its framing delimits it: Content-Length bytes, or chunked up
// to its last chunk and trailer section, whose fields join req.Trailer before the end is
// reported. The first read answers an Expect: 100-continue (lazily, so that a handler
// refusing the request first sends no 100). It may be read on a goroutine of the handler's
// while the response is written; Close, after the handler returned, ends any read.
type body struct {
	c       *conn
	req     *http.Request
	w       *response
	chunked bool
	remain  int64
	// expect is a 100 Continue still owed before the first read.
	expect atomic.Bool

	mu      sync.Mutex
	reading atomic.Bool
	closing atomic.Bool
	eof     bool
	err     error
}

// newBody returns the body of req, nil when it has none.
func (c *conn) newBody(req *http.Request) *body {
	h := &c.head
	if !h.Chunked && h.ContentLength <= 0 {
		return nil
	}
	b := &body{c: c, req: req, chunked: h.Chunked, remain: h.ContentLength}
	b.expect.Store(h.Expect100 && h.Minor >= 1)
	if h.Chunked {
		c.cr.Reset(c.br, &c.srv.opts.Limits)
	}
	return b
}

func (b *body) Read(p []byte) (int, error) {
	b.reading.Store(true)
	defer b.reading.Store(false)
	if b.closing.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	if testHookBeforeLock != nil {
		testHookBeforeLock()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closing.Load():
		// end ran between the check above and the lock: the connection's reader may be back
		// in its pool, another connection's already.
		return 0, http.ErrBodyReadAfterClose
	case b.eof:
		return 0, io.EOF
	case b.err != nil:
		return 0, b.err
	case len(p) == 0:
		return 0, nil
	}
	if b.expect.Swap(false) {
		b.c.writeContinue(b.w)
	}
	if b.chunked {
		return b.readChunked(p)
	}
	if int64(len(p)) > b.remain {
		p = p[:b.remain]
	}
	n, err := b.c.br.Read(p)
	b.remain -= int64(n)
	switch {
	case b.remain == 0:
		b.eof = true
		return n, io.EOF
	case errors.Is(err, io.EOF):
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

func (b *body) readChunked(p []byte) (int, error) {
	n, err := b.c.cr.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.eof = true
		b.mergeTrailers()
	case err != nil:
		b.err = err
	}
	return n, err
}

// mergeTrailers sets the trailer fields that arrived into req.Trailer, as net/http does.
func (b *body) mergeTrailers() {
	fields := b.c.cr.Trailers()
	if len(fields) == 0 {
		return
	}
	got := make(http.Header, len(fields))
	for _, f := range fields {
		k := textproto.CanonicalMIMEHeaderKey(string(f.Name))
		got[k] = append(got[k], string(f.Value))
	}
	if b.req.Trailer == nil {
		b.req.Trailer = got
		return
	}
	for k, vv := range got {
		b.req.Trailer[k] = vv
	}
}

// testHookBeforeLock, set by tests only, runs in Read between its first check of closing and
// its lock.
var testHookBeforeLock func()

// Close is the handler's: the server ends the body itself once the handler returned.
func (b *body) Close() error { return nil }

// end stops every further read, interrupting one in progress, and reports whether the body was
// read to its end.
func (b *body) end() bool {
	b.closing.Store(true)
	if b.reading.Load() {
		_ = b.c.rw.SetReadDeadline(time.Unix(1, 0))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// continueOwed reports whether the 100 Continue was still owed: the client may be holding a
// body back that the connection would then read as its next request.
func (b *body) continueOwed() bool { return b.expect.Load() }

// writeContinue sends 100 Continue unless the final response head is written already.
func (c *conn) writeContinue(w *response) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if w.wroteHeader || w.hijacked {
		return
	}
	// The write deadline may be a past response's, long expired.
	_ = c.rw.SetWriteDeadline(time.Now().Add(c.srv.opts.HeaderReadTimeout))
	_, _ = io.WriteString(c.rw, "HTTP/1.1 100 Continue\r\n\r\n")
}
