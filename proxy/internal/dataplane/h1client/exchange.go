package h1client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"syscall"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// inlineMax is the largest body of known length that leaves with the head, in one writev,
// when it is at hand: a request with GetBody has its body in memory (http.NewRequest sets it
// for byte slices and strings), so reading it does not wait for anyone. Any other body goes
// through the pump, since it may arrive slowly and the head must not wait for it.
const inlineMax = 64 << 10

// Errors of an exchange the backend broke.
var (
	ErrTooManyInformational = errors.New("h1client: too many 1xx responses")
	ErrUnexpectedSwitch     = errors.New("h1client: 101 Switching Protocols to a request that did not ask")
	ErrClientGone           = errors.New("h1client: the client left while the backend had not answered")
	ErrClosedBeforeAnswer   = errors.New("h1client: the backend closed the connection before answering")
	ErrShortBody            = errors.New("h1client: the request body is shorter than its Content-Length")
)

var inlineBuffers = sync.Pool{New: func() any { b := make([]byte, inlineMax); return &b }}

// RoundTrip sends req on a pooled or new connection and returns the backend's final response.
// The request's context bounds the whole exchange, body included: once it ends, the
// connection's reads and writes fail. The httptrace hooks GetConn, GotConn, WroteHeaders,
// WroteRequest and Got1xxResponse are called as net/http calls them.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	trace := httptrace.ContextClientTrace(ctx)
	f, body := requestFraming(req)
	var inline []byte
	var bp *[]byte
	if f.length > 0 && f.length <= inlineMax && req.GetBody != nil {
		bp = inlineBuffers.Get().(*[]byte)
		n, err := io.ReadFull(req.Body, (*bp)[:f.length])
		if err != nil {
			inlineBuffers.Put(bp)
			closeBody(req)
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				err = ErrShortBody
			}
			return nil, fmt.Errorf("h1client: read the request body: %w", err)
		}
		inline = (*bp)[:n]
		closeBody(req)
	}
	if bp != nil {
		defer inlineBuffers.Put(bp)
	}
	for attempt := 0; ; attempt++ {
		if trace != nil && trace.GetConn != nil {
			trace.GetConn(t.o.Address)
		}
		if attempt > 0 && ctx.Err() != nil {
			closeBody(req)
			return nil, fmt.Errorf("h1client: %w", context.Cause(ctx))
		}
		resp, c, err := t.attempt(ctx, req, trace, f, body, inline, attempt > 0)
		switch {
		case err == nil:
			return resp, nil
		case ctx.Err() != nil:
			closeBody(req)
			return nil, fmt.Errorf("h1client: %w", context.Cause(ctx))
		case attempt == 0 && c != nil && c.reused && retryable(err, req, f, inline):
			// As net/http does: a reused connection the backend had closed carries nothing,
			// and the request goes once more on a new one (the trace's GetConn says so,
			// where a caller may refuse a second attempt).
			continue
		}
		closeBody(req)
		return nil, err
	}
}

// attempt runs the exchange on a pooled connection, or a new one when fresh. It returns the
// connection it used, closed, on error.
func (t *Transport) attempt(ctx context.Context, req *http.Request, trace *httptrace.ClientTrace, f framing, body io.Reader, inline []byte, fresh bool) (*http.Response, *conn, error) {
	var c *conn
	var err error
	if fresh {
		c, err = t.dial(ctx)
	} else {
		c, err = t.get(ctx)
	}
	if err != nil {
		return nil, nil, err
	}
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: c.nc, Reused: c.reused})
	}
	head, err := c.appendHead(c.wbuf[:0], req, f)
	if err != nil {
		// Nothing was written: the connection stays as clean as it was.
		t.put(c)
		return nil, nil, err
	}
	c.wbuf = head[:0]
	resp, err := c.roundTrip(ctx, req, trace, f, body, head, inline)
	if err != nil {
		c.close()
		return nil, c, err
	}
	return resp, c, nil
}

// errNothingWritten is a failure to write any byte of a request.
var errNothingWritten = errors.New("h1client: nothing of the request was written")

// retryable says whether a request that failed on a reused connection may go again on a new
// one: when none of it was written, or when the backend closed or reset the connection before
// any byte of an answer and the request can be sent again as it was (no body, or one at hand)
// with a method that is idempotent (RFC 9110 9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or
// an Idempotency-Key. A backend that closes an idle connection as the request goes out then
// costs nothing.
func retryable(err error, req *http.Request, f framing, inline []byte) bool {
	if errors.Is(err, errNothingWritten) {
		return true
	}
	if !errors.Is(err, ErrClosedBeforeAnswer) || f.chunked || f.length > 0 && inline == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// roundTrip runs one exchange on c. On error the caller closes c.
func (c *conn) roundTrip(ctx context.Context, req *http.Request, trace *httptrace.ClientTrace, f framing, body io.Reader, head, inline []byte) (*http.Response, error) {
	c.watch(ctx)
	c.iov[0], c.iov[1] = head, inline
	c.bufs = c.iov[:1]
	if len(inline) > 0 {
		c.bufs = c.iov[:2]
	}
	n, err := c.bufs.WriteTo(c.nc)
	c.iov[0], c.iov[1] = nil, nil
	if err != nil {
		c.unwatch()
		if n == 0 {
			return nil, fmt.Errorf("%w: %w", errNothingWritten, err)
		}
		return nil, fmt.Errorf("h1client: write the request: %w", err)
	}
	if trace != nil && trace.WroteHeaders != nil {
		trace.WroteHeaders()
	}
	var p *pump
	if f.length > 0 && inline == nil || f.chunked {
		p = c.startPump(req, body, f, trace)
	} else {
		closeBody(req)
		if trace != nil && trace.WroteRequest != nil {
			trace.WroteRequest(httptrace.WroteRequestInfo{})
		}
	}
	resp, err := c.readResponse(ctx, req, trace, f, p)
	if err != nil {
		c.unwatch()
		p.finish()
		return nil, err
	}
	return resp, nil
}

// readResponse reads responses until the final one: 100s are dropped, other 1xx reported to
// the trace, a 101 accepted only for an upgrade.
func (c *conn) readResponse(ctx context.Context, req *http.Request, trace *httptrace.ClientTrace, f framing, p *pump) (*http.Response, error) {
	head := req.Method == http.MethodHead
	for n := 0; ; n++ {
		if err := c.readHead(ctx, head, p, n == 0); err != nil {
			return nil, err
		}
		r := &c.resp
		switch {
		case r.Status == http.StatusSwitchingProtocols:
			if !f.upgrade {
				return nil, ErrUnexpectedSwitch
			}
			return c.switched(req, p)
		case r.Status >= 200:
			return c.final(req, p), nil
		case n == c.t.o.MaxInformational:
			return nil, ErrTooManyInformational
		}
		if r.Status != http.StatusContinue && trace != nil && trace.Got1xxResponse != nil {
			hdr, _ := c.header(false)
			if err := trace.Got1xxResponse(r.Status, textproto.MIMEHeader(hdr)); err != nil {
				return nil, err
			}
		}
		if _, err := c.br.Discard(r.HeadLen); err != nil {
			return nil, err
		}
	}
}

// readHead reads until c.br holds a whole response head and parses it into c.resp; first
// says no byte of an answer came before (no 1xx). The wait
// is cut in slices of WatchInterval when the request's client is watched, or while the pump
// still sends the body: between slices a gone client ends the exchange, and the first-byte
// timeout counts from the end of the request.
func (c *conn) readHead(ctx context.Context, head bool, p *pump, first bool) error {
	o := &c.t.o
	watch := http1.ClientWatchOf(ctx)
	sent := time.Now()
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		if len(buf) > 0 {
			err := http1.ParseResponse(buf, head, &c.resp, &c.t.limits)
			c.head = buf
			if !errors.Is(err, http1.ErrIncomplete) {
				if err != nil {
					return fmt.Errorf("h1client: response from %s: %w", o.Address, err)
				}
				c.setReadDeadline(time.Time{})
				return nil
			}
			if len(buf) == c.br.Size() {
				return c.readLongHead(head)
			}
		}
		pumping := p.running()
		now := time.Now()
		if pumping {
			sent = now
		}
		var deadline time.Time
		if o.FirstByteTimeout > 0 {
			deadline = sent.Add(o.FirstByteTimeout)
		}
		sliced := false
		if s := now.Add(o.WatchInterval); (watch != nil || pumping) && (deadline.IsZero() || s.Before(deadline)) {
			deadline, sliced = s, true
		}
		c.setReadDeadline(deadline)
		_, err := c.br.Peek(len(buf) + 1)
		switch {
		case err == nil:
		case sliced && isTimeout(err) && !c.cancelled.Load():
			if watch != nil && watch.ClientGone() {
				return ErrClientGone
			}
		case first && len(buf) == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
			return fmt.Errorf("%w: %w", ErrClosedBeforeAnswer, err)
		case errors.Is(err, io.EOF):
			return fmt.Errorf("h1client: response head from %s: %w", o.Address, io.ErrUnexpectedEOF)
		default:
			return fmt.Errorf("h1client: read the response from %s: %w", o.Address, err)
		}
	}
}

// readLongHead parses a head longer than the read buffer: it is read into a buffer of its
// own up to MaxHeaderBytes, which is then read again before the connection. The connection is
// not reused after such a response.
func (c *conn) readLongHead(head bool) error {
	big := make([]byte, 0, 2*c.br.Size())
	for {
		n := c.br.Buffered()
		b, _ := c.br.Peek(n)
		big = append(big, b...)
		_, _ = c.br.Discard(n)
		err := http1.ParseResponse(big, head, &c.resp, &c.t.limits)
		c.head = big
		switch {
		case err == nil:
			// The head stays in big, where the fields point; the new reader gives it again,
			// for the caller to discard like any head, then the bytes after it.
			c.setReadDeadline(time.Time{})
			c.br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(big), c.nc), c.br.Size())
			c.long = true
			return nil
		case !errors.Is(err, http1.ErrIncomplete):
			return fmt.Errorf("h1client: response from %s: %w", c.t.o.Address, err)
		}
		if _, err := c.br.Peek(1); err != nil {
			return fmt.Errorf("h1client: read the response from %s: %w", c.t.o.Address, err)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// header converts the parsed head to an http.Header as net/http's ReadResponse gives it, and
// returns its status text ("200 OK"). The head is copied into one string, which the names and
// values are substrings of. In a final head, the framing fields net/http moves to Response
// fields are left out (Transfer-Encoding; Content-Length and Trailer of a chunked body;
// Connection listing close in HTTP/1.1).
func (c *conn) header(final bool) (http.Header, string) {
	r := &c.resp
	s := string(c.head[:r.HeadLen])
	// A field is a slice of c.head up to its end: its offset is what its capacity lacks.
	at := func(b []byte) string {
		o := cap(c.head) - cap(b)
		return s[o : o+len(b)]
	}
	h := make(http.Header, len(r.Fields))
	values := make([]string, len(r.Fields))
	for i, f := range r.Fields {
		k := textproto.CanonicalMIMEHeaderKey(at(f.Name))
		if final {
			switch {
			case k == "Transfer-Encoding",
				r.Chunked && (k == "Trailer" || k == "Content-Length" && r.Framing == http1.FramingChunked),
				k == "Connection" && r.Minor == 1 && !r.KeepAlive && listsClose(f.Value):
				continue
			}
		}
		if vv, ok := h[k]; ok {
			h[k] = append(vv, at(f.Value))
			continue
		}
		values[i] = at(f.Value)
		h[k] = values[i : i+1 : i+1]
	}
	status := s[len("HTTP/1.1 "):]
	if i := strings.IndexByte(status, '\r'); i >= 0 {
		status = status[:i]
	}
	return h, status
}

func listsClose(v []byte) bool {
	for tok := range bytes.SplitSeq(v, []byte(",")) {
		if bytes.EqualFold(bytes.TrimSpace(tok), []byte("close")) {
			return true
		}
	}
	return false
}

// newResponse fills resp with the parsed final head, without its body.
func (c *conn) newResponse(resp *http.Response, req *http.Request) {
	r := &c.resp
	hdr, status := c.header(true)
	*resp = http.Response{
		Status:        status,
		StatusCode:    r.Status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    r.Minor,
		Header:        hdr,
		ContentLength: r.ContentLength,
		Close:         !r.KeepAlive,
		Request:       req,
	}
	if r.Minor == 0 {
		resp.Proto = "HTTP/1.0"
	}
	if r.Chunked {
		resp.TransferEncoding = chunkedCoding
	}
	if r.Framing == http1.FramingChunked {
		resp.Trailer = announcedTrailer(r)
	}
}

// chunkedCoding is Response.TransferEncoding of a chunked response.
var chunkedCoding = []string{"chunked"}

// announcedTrailer returns the trailer fields a chunked response announces, with no values
// yet, nil for none.
func announcedTrailer(r *http1.Response) http.Header {
	var tr http.Header
	for _, f := range r.Fields {
		if !bytes.EqualFold(f.Name, []byte("Trailer")) {
			continue
		}
		for tok := range bytes.SplitSeq(f.Value, []byte(",")) {
			if tok = bytes.TrimSpace(tok); len(tok) > 0 {
				if tr == nil {
					tr = http.Header{}
				}
				tr[textproto.CanonicalMIMEHeaderKey(string(tok))] = nil
			}
		}
	}
	return tr
}
