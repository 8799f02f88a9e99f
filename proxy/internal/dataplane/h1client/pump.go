package h1client

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
	"sync/atomic"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// chunkRoom is the room before a chunk's data for its size line (15 hex digits and CRLF),
// and after it for its CRLF.
const (
	chunkRoom = 17
	chunkTail = 2
)

var pumpBuffers sync.Pool

// pump sends a request body that is not at hand, on a goroutine of its own, while the
// exchange reads the response: a backend may answer before it has read the body, and a
// client that writes and then reads would wait for it forever.
type pump struct {
	c     *conn
	req   *http.Request
	body  io.Reader
	f     framing
	trace *httptrace.ClientTrace
	done  chan struct{}
	// state is pumpWriting, pumpReading (blocked in the body's Read) or pumpStopped (the
	// exchange ended: what the pump still reads is not sent).
	state atomic.Int32
	// err is why the body was not sent whole, nil once it was; read after done.
	err error
	// sent says the body's last byte was written.
	sent atomic.Bool
}

// startPump starts sending body, framed as f says.
func (c *conn) startPump(req *http.Request, body io.Reader, f framing, trace *httptrace.ClientTrace) *pump {
	p := &pump{c: c, req: req, body: body, f: f, trace: trace, done: make(chan struct{})}
	go p.run()
	return p
}

func (p *pump) run() {
	defer close(p.done)
	defer closeBody(p.req)
	size := p.c.t.o.BufferSize
	bp, _ := pumpBuffers.Get().(*[]byte)
	if bp == nil || len(*bp) != size {
		b := make([]byte, size)
		bp = &b
	}
	defer pumpBuffers.Put(bp)
	var err error
	if p.f.chunked {
		err = p.sendChunked(*bp)
	} else {
		err = p.sendLength(*bp)
	}
	p.err = err
	if err == nil {
		p.sent.Store(true)
	}
	var ce *clientError
	switch {
	case errors.As(err, &ce) && !p.stopped():
		// The backend waits for the rest of a body that will not come: the exchange ends.
		p.c.close()
	case err == nil && p.trace != nil && p.trace.WroteRequest != nil:
		p.trace.WroteRequest(httptrace.WroteRequestInfo{})
	}
}

// The states of a pump.
const (
	pumpWriting int32 = iota
	pumpReading
	pumpStopped
)

// clientError is a failure to read the request body, as opposed to sending it.
type clientError struct{ err error }

func (e *clientError) Error() string { return "h1client: read the request body: " + e.err.Error() }
func (e *clientError) Unwrap() error { return e.err }

// read reads the body, reporting its failures as the client's; it returns errStopped, and
// drops what it read, once the exchange ended.
func (p *pump) read(b []byte) (int, error) {
	if !p.state.CompareAndSwap(pumpWriting, pumpReading) {
		return 0, errStopped
	}
	n, err := p.body.Read(b)
	if !p.state.CompareAndSwap(pumpReading, pumpWriting) {
		return 0, errStopped
	}
	if err != nil && !errors.Is(err, io.EOF) {
		err = &clientError{err}
	}
	return n, err
}

// sendLength sends f.length bytes of the body, and nothing beyond.
func (p *pump) sendLength(buf []byte) error {
	left := p.f.length
	for left > 0 {
		n, rerr := p.read(buf[:min(int64(len(buf)), left)])
		if errors.Is(rerr, errStopped) {
			return rerr
		}
		if n > 0 {
			if _, err := p.c.nc.Write(buf[:n]); err != nil {
				return fmt.Errorf("h1client: send the request body: %w", err)
			}
			left -= int64(n)
		}
		switch {
		case left == 0:
			return nil
		case errors.Is(rerr, io.EOF):
			return &clientError{ErrShortBody}
		case rerr != nil:
			return rerr
		}
	}
	return nil
}

// errStopped is the pump's end when the exchange ended before the body was sent.
var errStopped = errors.New("h1client: exchange ended before the request body was sent")

// sendChunked sends the body in chunks, one write each, then the last chunk and the trailers
// of req.Trailer.
func (p *pump) sendChunked(buf []byte) error {
	data := buf[chunkRoom : len(buf)-chunkTail]
	for {
		n, rerr := p.read(data)
		if errors.Is(rerr, errStopped) {
			return rerr
		}
		var out []byte
		if n > 0 {
			line := http1.AppendChunkHeader(buf[:0:chunkRoom], n)
			start := chunkRoom - len(line)
			copy(buf[start:], line)
			out = buf[start : chunkRoom+n+chunkTail]
			out[len(out)-2], out[len(out)-1] = '\r', '\n'
		}
		eof := errors.Is(rerr, io.EOF)
		switch {
		case eof:
			out = http1.AppendLastChunk(out, trailerFields(p.req.Trailer))
		case rerr != nil:
			return rerr
		}
		if len(out) > 0 {
			if _, err := p.c.nc.Write(out); err != nil {
				return fmt.Errorf("h1client: send the request body: %w", err)
			}
		}
		if eof {
			return nil
		}
	}
}

// trailerFields returns the trailer fields of t, sorted by name.
func trailerFields(t http.Header) []http1.Field {
	if len(t) == 0 {
		return nil
	}
	names := make([]string, 0, len(t))
	for k := range t {
		names = append(names, k)
	}
	slices.Sort(names)
	var fs []http1.Field
	for _, k := range names {
		for _, v := range t[k] {
			fs = append(fs, http1.Field{Name: []byte(k), Value: []byte(v)})
		}
	}
	return fs
}

// running reports whether the pump still sends.
func (p *pump) running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// early reports whether the body was not yet sent whole: said when a final head comes,
// the backend answered before it had the whole request.
func (p *pump) early() bool { return p != nil && !p.sent.Load() }

// stopped reports whether the exchange ended before the pump did.
func (p *pump) stopped() bool { return p.state.Load() == pumpStopped }

// finish ends the pump's part in the exchange and reports whether the body was sent whole. A
// pump blocked in the body's Read is left to end on its own (what it reads is dropped) and the
// body counts as not sent; a pump writing is stopped (a write in progress fails at once) and
// waited for, so that a body whose last write has just returned counts as sent.
func (p *pump) finish() bool {
	if p == nil {
		return true
	}
	for {
		switch s := p.state.Load(); s {
		case pumpStopped:
			return false
		case pumpReading:
			if p.state.CompareAndSwap(s, pumpStopped) {
				_ = p.c.nc.SetWriteDeadline(aLongTimeAgo)
				return false
			}
		default:
			if p.state.CompareAndSwap(s, pumpStopped) {
				_ = p.c.nc.SetWriteDeadline(aLongTimeAgo)
				<-p.done
				return p.err == nil
			}
		}
	}
}
