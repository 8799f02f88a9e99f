package h1server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// errAgain is a non-blocking read that found nothing to read.
var errAgain = errors.New("h1server: read would block")

// Lingering close after a refused head: how long, and how many bytes at most, the client's
// bytes still arriving are read and dropped after the answer, so that its close does not
// reset the connection before the client has read the answer (net/http waits 500 ms).
const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 256 << 10
)

// conn is one client connection. Its goroutine alone reads it and writes responses, except
// the body's reader (which may be another goroutine of the handler's) and its 100 Continue.
type conn struct {
	srv *Server
	// nc is the connection as given, closed through it; rw reads, writes and moves the
	// deadlines: the TCP connection under the given one when it is plaintext TCP (so writes
	// are one writev), else nc.
	nc, rw net.Conn
	// raw is the TCP socket, also under TLS, for the watch on the client; plain says rw is
	// that socket, which the idle wait then reads itself.
	raw   syscall.RawConn
	plain bool

	src source
	// br holds the bytes read and not yet consumed; nil while the connection is idle.
	br  *bufio.Reader
	one [1]byte
	// readFn is readAvailable, made once; rerr is what its read failed with.
	readFn func(fd uintptr) bool
	rerr   error
	// bufs is the vector of a write.
	bufs net.Buffers

	head   headRequest
	cr     chunkedReader
	ctx    context.Context
	remote string
	tls    *tls.ConnectionState
	first  bool

	// wmu serialises the writes to the connection.
	wmu sync.Mutex

	mu     sync.Mutex
	idle   bool
	closed bool
	// kept says the connection outlives its goroutine: hijacked, or handed to H2C.
	kept bool
	// parked says the connection waits in the idle poller, with no goroutine; fd is its
	// socket, idleBy the end of its idle timeout, and waking says its goroutine was started
	// by the poller (the idle timeout runs on).
	parked bool
	fd     int
	idleBy time.Time
	waking bool

	// cancel ends the context of the request being served; gone says ClientGone found its
	// client gone.
	cancel context.CancelFunc
	gone   bool
}

// source is what the read buffer reads: the bytes of prefix first, then the connection, or,
// while raw is set, the socket fd without waiting.
type source struct {
	c      *conn
	prefix []byte
	raw    bool
	fd     int
}

func (s *source) Read(p []byte) (int, error) {
	if len(s.prefix) > 0 {
		n := copy(p, s.prefix)
		s.prefix = s.prefix[n:]
		return n, nil
	}
	if !s.raw {
		return s.c.rw.Read(p)
	}
	for {
		n, err := syscall.Read(s.fd, p)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return 0, errAgain
		case err != nil:
			return 0, &net.OpError{Op: "read", Net: "tcp", Err: err}
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{srv: s, nc: nc, rw: nc, first: true, remote: nc.RemoteAddr().String()}
	c.src.c = c
	if tcp := underTCP(nc); tcp != nil {
		c.raw, _ = tcp.SyscallConn()
		if _, isTLS := nc.(*tls.Conn); !isTLS && c.raw != nil {
			c.rw, c.plain = tcp, true
			_ = c.raw.Control(func(fd uintptr) { c.fd = int(fd) })
		}
	}
	c.tls = tlsState(nc)
	ctx := context.WithValue(context.Background(), http.LocalAddrContextKey, nc.LocalAddr())
	if s.opts.ConnContext != nil {
		ctx = s.opts.ConnContext(ctx, nc)
	}
	c.ctx = http1.WithClientWatch(ctx, c)
	return c
}

// underTCP returns the TCP connection c wraps, nil when there is none.
func underTCP(c net.Conn) *net.TCPConn {
	for range 8 {
		switch x := c.(type) {
		case *net.TCPConn:
			return x
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// serve runs the connection's requests one after the other, until the connection ends or,
// when it reports true, parks (the goroutine must then no longer touch it).
func (c *conn) serve() (parked bool) {
	defer func() {
		if !parked {
			c.end()
		}
	}()
	if c.first {
		_ = c.rw.SetReadDeadline(time.Now().Add(c.srv.opts.HeaderReadTimeout))
	}
	for {
		if c.br == nil {
			ok, parked := c.await()
			if parked {
				return true
			}
			if !ok {
				return false
			}
		}
		if c.first && c.srv.opts.H2C != nil && c.tls == nil {
			if handed, ok := c.maybeH2C(); handed || !ok {
				return false
			}
		}
		if err := c.readHead(); err != nil {
			var refused *http1.Error
			if errors.As(err, &refused) {
				c.refuse(refused)
			}
			return false
		}
		if !c.serveRequest() {
			return false
		}
		c.first = false
		c.forgetHead()
		if c.br.Buffered() == 0 {
			c.release()
		}
	}
}

// end closes the connection, unless it was kept, and gives its buffers back.
func (c *conn) end() {
	c.mu.Lock()
	kept := c.kept
	c.closed = true
	c.mu.Unlock()
	if kept {
		return
	}
	c.release()
	_ = c.nc.Close()
}

// forgetHead drops the parsed head's slices of the read buffer, so that an idle connection
// pins no buffer the pool gave back, keeping the capacity of its field list.
func (c *conn) forgetHead() {
	if c.head.Chunked {
		c.cr.Reset(nil, &c.srv.opts.Limits)
	}
	f := c.head.Fields[:cap(c.head.Fields)]
	clear(f)
	c.head = headRequest{Fields: f[:0]}
}

// release gives the read buffer back.
func (c *conn) release() {
	if c.br != nil {
		c.srv.putReader(c.br)
		c.br = nil
	}
}

// await waits for the next request's first bytes holding no buffer, and reports whether
// they came. A connection past its first request is idle meanwhile, under IdleTimeout; a
// plaintext one still idle after ParkAfter parks (parked true), its goroutine to return.
func (c *conn) await() (ok, parked bool) {
	if c.first {
		err := c.wait()
		return c.leaveIdle() && err == nil, false
	}
	if !c.enterIdle() {
		return false, false
	}
	if !c.waking {
		c.idleBy = time.Now().Add(c.srv.opts.IdleTimeout)
	}
	c.waking = false
	tryPark := c.plain && c.srv.opts.ParkAfter > 0
	for {
		by, parking := c.idleBy, false
		if t := time.Now().Add(c.srv.opts.ParkAfter); tryPark && t.Before(by) {
			by, parking = t, true
		}
		_ = c.rw.SetReadDeadline(by)
		err := c.wait()
		if parking && errors.Is(err, os.ErrDeadlineExceeded) {
			if c.park() {
				return false, true
			}
			tryPark = false
			continue
		}
		return c.leaveIdle() && err == nil, false
	}
}

// park hands the idle connection to the poller; true means the poller owns it now.
func (c *conn) park() bool {
	p := c.srv.poller()
	if p == nil {
		return false
	}
	c.mu.Lock()
	if c.closed || c.srv.shutdown.Load() {
		c.mu.Unlock()
		return false
	}
	c.parked, c.waking = true, true
	c.mu.Unlock()
	if p.park(c) {
		return true
	}
	c.mu.Lock()
	c.parked, c.waking = false, false
	c.mu.Unlock()
	return false
}

// closeIfParked closes a parked connection once taken from the poller, and reports whether
// it did (its caller then stops tracking it: it has no goroutine to).
func (c *conn) closeIfParked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.parked || c.closed || !c.srv.poll.take(c) {
		return false
	}
	c.parked, c.closed = false, true
	_ = c.nc.Close()
	return true
}

// closeParked closes a connection the poller's sweep took out for its idle timeout.
func (c *conn) closeParked() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.parked, c.closed = false, true
	_ = c.nc.Close()
}

// wait reads the first bytes into a pooled buffer. On plaintext TCP the buffer is taken in the
// read callback and given back when the socket has nothing, so the parked goroutine holds
// none; on any other connection a 1-byte read waits, and its byte starts the buffer.
func (c *conn) wait() error {
	if !c.plain {
		n, err := c.rw.Read(c.one[:])
		if n == 0 {
			if err == nil {
				err = io.ErrNoProgress
			}
			return err
		}
		c.src.prefix = c.one[:1]
		c.br = c.srv.getReader(&c.src)
		return nil
	}
	if c.readFn == nil {
		c.readFn = c.readAvailable
	}
	if err := c.raw.Read(c.readFn); err != nil {
		return err
	}
	err := c.rerr
	c.rerr = nil
	return err
}

// readAvailable is the idle wait's read callback: it reads what the socket has into a pooled
// buffer, and gives the buffer back and asks to wait when it has nothing yet.
func (c *conn) readAvailable(fd uintptr) bool {
	br := c.srv.getReader(&c.src)
	c.src.fd, c.src.raw = int(fd), true
	_, err := br.Peek(1)
	c.src.raw = false
	if errors.Is(err, errAgain) {
		c.srv.putReader(br)
		return false
	}
	c.br, c.rerr = br, err
	return true
}

func (c *conn) enterIdle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.parked = false
	if c.srv.shutdown.Load() || c.closed {
		return false
	}
	c.idle = true
	return true
}

func (c *conn) leaveIdle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.idle = false
	return !c.closed
}

// closeIfIdle closes the connection when it waits between requests, and reports whether it
// closed a parked one (which has no goroutine to stop tracking it). One serving a request
// whose client closed its side has the request cancelled, so that a drain does not wait on a
// response nobody reads.
func (c *conn) closeIfIdle() bool {
	if c.closeIfParked() {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.parked:
		// Woken meanwhile: its new goroutine sees the shutdown.
	case c.idle && !c.closed:
		c.closed = true
		_ = c.nc.Close()
	case !c.idle && c.cancel != nil && c.peek() != peekOpen:
		c.gone = true
		c.cancel()
	}
	return false
}

// readHead reads until the buffer holds a whole head, which it leaves parsed in c.head: the
// buffer grows to the header limit only while the head is incomplete, and a head that started
// after the connection's first request has HeaderReadTimeout from its first byte.
func (c *conn) readHead() error {
	deadline := c.first
	lim := &c.srv.opts.Limits
	for {
		b, _ := c.br.Peek(c.br.Buffered())
		err := parseRequest(b, &c.head, lim)
		if !errors.Is(err, http1.ErrIncomplete) {
			return err
		}
		if c.br.Buffered() == c.br.Size() {
			if c.br.Size() >= c.srv.headSize {
				return &http1.Error{Status: http.StatusRequestHeaderFieldsTooLarge, Reason: "header_too_large"}
			}
			c.grow()
		}
		if !deadline {
			deadline = true
			_ = c.rw.SetReadDeadline(time.Now().Add(c.srv.opts.HeaderReadTimeout))
		}
		if _, err := c.br.Peek(c.br.Buffered() + 1); err != nil {
			return err
		}
	}
}

// grow moves the buffered bytes to a buffer of the header limit's size.
func (c *conn) grow() {
	old := c.br
	c.src.prefix, _ = old.Peek(old.Buffered())
	n := len(c.src.prefix)
	c.br = c.srv.heads.Get().(*bufio.Reader)
	c.br.Reset(&c.src)
	_, _ = c.br.Peek(n)
	c.src.prefix = nil
	c.srv.putReader(old)
}

// preface is the HTTP/2 client connection preface (RFC 9113 section 3.4).
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// maybeH2C hands the connection to H2C when its first bytes are the HTTP/2 preface: it reads
// while they are a strict prefix of it. handed says it went, ok false that reading failed.
func (c *conn) maybeH2C() (handed, ok bool) {
	for {
		n := min(c.br.Buffered(), len(preface))
		b, _ := c.br.Peek(n)
		if string(b) != preface[:n] {
			return false, true
		}
		if n == len(preface) {
			break
		}
		if _, err := c.br.Peek(n + 1); err != nil {
			return false, false
		}
	}
	b, _ := c.br.Peek(c.br.Buffered())
	rc := &replayConn{Conn: c.nc, pending: append([]byte(nil), b...)}
	c.mu.Lock()
	c.kept = true
	c.mu.Unlock()
	c.release()
	c.srv.opts.H2C(rc)
	return true, true
}

// replayConn is a connection whose first reads return bytes already read from it.
type replayConn struct {
	net.Conn
	pending []byte
}

func (r *replayConn) Read(p []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(p, r.pending)
		r.pending = r.pending[n:]
		return n, nil
	}
	return r.Conn.Read(p)
}

// NetConn returns the connection under r.
func (r *replayConn) NetConn() net.Conn { return r.Conn }

// refuse answers a refused head with its status and closes the connection: nothing after the
// head is read for another request.
func (c *conn) refuse(e *http1.Error) {
	c.srv.opts.Refused(Refusal{Reason: e.Reason, Status: e.Status, RemoteAddr: c.remote, TLS: c.tls})
	_ = c.rw.SetWriteDeadline(time.Now().Add(c.srv.opts.HeaderReadTimeout))
	c.wmu.Lock()
	_, err := io.WriteString(c.rw, refusal(e))
	c.wmu.Unlock()
	if err == nil {
		c.linger()
	}
}

// errorHeaders are the fields of net/http's answers to requests it cannot read.
const errorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// statusTexts are the texts net/http's server gives the refusals it words, by reason.
var statusTexts = map[string]string{
	http1.ReasonMissingHost:        "missing required Host header",
	http1.ReasonHost:               "malformed Host header",
	http1.ReasonSpaceBeforeColon:   "invalid header name",
	http1.ReasonFieldName:          "invalid header name",
	http1.ReasonFieldValue:         "invalid header value",
	http1.ReasonUnsupportedVersion: "unsupported protocol version",
}

// refusal returns the answer to a refused head, worded as net/http's server words its own.
func refusal(e *http1.Error) string {
	status := strconv.Itoa(e.Status) + " " + http.StatusText(e.Status)
	switch {
	case e.Status == http.StatusExpectationFailed:
		return "HTTP/1.1 " + status + "\r\nConnection: close\r\nDate: " + string(date()) + "\r\nContent-Length: 0\r\n\r\n"
	case e.Status == http.StatusNotImplemented:
		return "HTTP/1.1 " + status + errorHeaders + "Unsupported transfer encoding"
	case statusTexts[e.Reason] != "":
		status += ": " + statusTexts[e.Reason]
	}
	return "HTTP/1.1 " + status + errorHeaders + status
}

// linger half-closes the connection and drops what the client still sends for a moment.
func (c *conn) linger() {
	if cw, ok := c.rw.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.rw.SetReadDeadline(time.Now().Add(lingerTime))
	if c.br == nil {
		c.br = c.srv.getReader(&c.src)
	}
	c.src.prefix = nil
	_, _ = c.br.Discard(c.br.Buffered())
	_, _ = io.CopyN(io.Discard, c.br, lingerBytes)
}
