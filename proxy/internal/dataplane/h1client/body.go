package h1client

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"sync"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// final returns the response of the parsed final head, its body framed as the head says. A
// response with an empty body gives its connection back at once; one without a body by its
// request's method (HEAD) or its status (204, 304) closes it, since a backend that sent a
// body anyway, a moment later, would have it read as the next request's answer. So does a
// head that came before the request's body was sent whole: the backend answered without
// reading the body, which it may yet read as a request of its own.
func (c *conn) final(req *http.Request, p *pump) *http.Response {
	rb := &responseBody{}
	resp, b := &rb.resp, &rb.body
	c.newResponse(resp, req)
	r := &c.resp
	_, _ = c.br.Discard(r.HeadLen)
	keepAlive := r.KeepAlive && !p.early()
	*b = body{c: c, p: p, resp: resp, framing: r.Framing, remain: r.ContentLength, keepAlive: keepAlive}
	switch {
	case r.Framing == http1.FramingNone:
		resp.Body = http.NoBody
		b.release(false)
		return resp
	case r.Framing == http1.FramingLength && r.ContentLength == 0:
		resp.Body = http.NoBody
		b.release(true)
		return resp
	case r.Framing == http1.FramingChunked:
		b.chunks.Reset(c.br, &c.t.limits)
	}
	resp.Body = b
	return resp
}

// responseBody is a response and its body, allocated together.
type responseBody struct {
	resp http.Response
	body body
}

// body is a response body read from its connection. Once read to its end, with nothing left
// over and the request sent whole, the connection goes back to the pool; a body closed
// before its end, or one that failed, closes it.
type body struct {
	c         *conn
	p         *pump
	resp      *http.Response
	framing   http1.Framing
	remain    int64
	keepAlive bool
	chunks    http1.ChunkedReader
	err       error
}

func (b *body) Read(p []byte) (int, error) {
	if b.c == nil {
		if b.err != nil {
			return 0, b.err
		}
		return 0, io.EOF
	}
	switch b.framing {
	case http1.FramingLength:
		return b.readLength(p)
	case http1.FramingChunked:
		return b.readChunked(p)
	}
	return b.readClose(p)
}

// readLength reads a body of Content-Length bytes; its last bytes come with io.EOF.
func (b *body) readLength(p []byte) (int, error) {
	if int64(len(p)) > b.remain {
		p = p[:b.remain]
	}
	n, err := b.c.br.Read(p)
	b.remain -= int64(n)
	switch {
	case b.remain == 0:
		b.release(true)
		return n, io.EOF
	case errors.Is(err, io.EOF):
		return n, b.fail(io.ErrUnexpectedEOF)
	case err != nil:
		return n, b.fail(err)
	}
	return n, nil
}

// readChunked reads a chunked body; at its end the trailers fill resp.Trailer.
func (b *body) readChunked(p []byte) (int, error) {
	n, err := b.chunks.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.trailers()
		b.release(true)
		return n, io.EOF
	case err != nil:
		return n, b.fail(err)
	}
	return n, nil
}

// readClose reads a body that ends with the connection.
func (b *body) readClose(p []byte) (int, error) {
	n, err := b.c.br.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.release(false)
		return n, io.EOF
	case err != nil:
		return n, b.fail(err)
	}
	return n, nil
}

// trailers merges the trailer section into resp.Trailer, announced or not, as net/http does.
func (b *body) trailers() {
	fs := b.chunks.Trailers()
	if len(fs) == 0 {
		return
	}
	if b.resp.Trailer == nil {
		b.resp.Trailer = make(http.Header, len(fs))
	}
	for _, f := range fs {
		k := textproto.CanonicalMIMEHeaderKey(string(f.Name))
		b.resp.Trailer[k] = append(b.resp.Trailer[k], string(f.Value))
	}
}

// fail ends the body with err (the context's cause once it ended) and closes the connection.
func (b *body) fail(err error) error {
	c := b.c
	if c.cancelled.Load() {
		err = errCancelled
	}
	b.err = fmt.Errorf("h1client: response body from %s: %w", c.t.o.Address, err)
	b.release(false)
	return b.err
}

// errCancelled is a body's error once the request's context ended.
var errCancelled = errors.New("h1client: request cancelled")

// Close ends the body; before its end it closes the connection.
func (b *body) Close() error {
	if b.c != nil {
		b.err = errors.New("h1client: read on a closed response body")
		b.release(false)
	}
	return nil
}

// release ends the exchange: the connection goes back to the pool when the response was read
// whole (complete), the request was sent whole, both sides keep it alive, and no byte is left
// over; otherwise it is closed. The pump, if still sending, is stopped.
func (b *body) release(complete bool) {
	c := b.c
	b.c = nil
	watched := c.unwatch()
	sent := b.p.finish()
	if complete && watched && sent && b.keepAlive && !c.long && c.drained() {
		_ = c.nc.SetDeadline(time.Time{})
		c.t.put(c)
		return
	}
	c.close()
}

// switched returns the 101 response to an upgrade: its body is the connection, read and
// written both ways, and no longer bound to the request's context (the tunnel outlives it).
func (c *conn) switched(req *http.Request, p *pump) (*http.Response, error) {
	resp := &http.Response{}
	c.newResponse(resp, req)
	_, _ = c.br.Discard(c.resp.HeadLen)
	p.finish()
	if !c.unwatch() {
		return nil, errCancelled
	}
	_ = c.nc.SetDeadline(time.Time{})
	resp.Body = &upgraded{c: c}
	return resp, nil
}

// upgraded is the connection after a 101: the bytes the backend sent after the head first.
type upgraded struct{ c *conn }

func (u *upgraded) Read(p []byte) (int, error)  { return u.c.br.Read(p) }
func (u *upgraded) Write(p []byte) (int, error) { return u.c.nc.Write(p) }

func (u *upgraded) Close() error {
	u.c.close()
	return nil
}

// CloseWrite half-closes the connection, so that the backend sees the end of what the client
// sent while its own direction goes on.
func (u *upgraded) CloseWrite() error {
	if cw, ok := u.c.nc.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return u.Close()
}

// spliceSlice is the most WriteTo hands to the writer at once: the writer re-arms its idle
// and send timeouts between slices, so a slice is what the kernel moves between two of them
// (a backend or client slower than a slice per timeout is given up, as one slower than a
// 32 KiB chunk per timeout is when copied).
const spliceSlice = 64 << 10

// WriteTo moves the rest of the body to w, which io.Copy(w, body) calls. For a Content-Length
// body over plain TCP it writes the bytes already read from the connection, then gives w the
// connection itself as the source, in slices of 64 KiB: a writer whose ReadFrom is a
// *net.TCPConn's (directly or by delegating to one) then moves them with splice(2), never
// through user space. Any other body is copied through a buffer. The connection is reused as
// after Read.
func (b *body) WriteTo(w io.Writer) (int64, error) {
	if b.c == nil {
		return 0, b.err
	}
	tcp, ok := b.c.nc.(*net.TCPConn)
	if b.framing != http1.FramingLength || !ok || b.c.long {
		return b.copyTo(w)
	}
	var total int64
	if n := min(int64(b.c.br.Buffered()), b.remain); n > 0 {
		buf, _ := b.c.br.Peek(int(n))
		m, err := w.Write(buf)
		_, _ = b.c.br.Discard(m)
		b.remain -= int64(m)
		total += int64(m)
		if err != nil {
			return total, b.fail(err)
		}
	}
	bp := copyBuffer()
	defer copyBuffers.Put(bp)
	for b.remain > 0 {
		n, err := io.CopyBuffer(w, &io.LimitedReader{R: tcp, N: min(b.remain, spliceSlice)}, *bp)
		b.remain -= n
		total += n
		switch {
		case err != nil:
			return total, b.fail(err)
		case b.remain > 0 && n < min(b.remain+n, spliceSlice):
			return total, b.fail(io.ErrUnexpectedEOF)
		}
	}
	b.release(true)
	return total, nil
}

// copyTo copies the body to w through a pooled buffer.
func (b *body) copyTo(w io.Writer) (int64, error) {
	bp := copyBuffer()
	defer copyBuffers.Put(bp)
	var total int64
	for {
		n, rerr := b.Read(*bp)
		if n > 0 {
			m, err := w.Write((*bp)[:n])
			total += int64(m)
			if err != nil {
				if b.c != nil {
					_ = b.fail(err)
				}
				return total, err
			}
		}
		switch {
		case errors.Is(rerr, io.EOF):
			return total, nil
		case rerr != nil:
			return total, rerr
		}
	}
}

var copyBuffers sync.Pool

func copyBuffer() *[]byte {
	if bp, ok := copyBuffers.Get().(*[]byte); ok {
		return bp
	}
	b := make([]byte, 32<<10)
	return &b
}
