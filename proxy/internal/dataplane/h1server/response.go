package h1server

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// bufferBeforeHead is how many body bytes wait for the handler to end before the head leaves
// without a length, net/http's bufferBeforeChunkingSize: a handler that writes more has its
// response chunked, unless it set a Content-Length.
const bufferBeforeHead = 2048

// ErrHijacked is a write to a response whose connection a handler took over.
var ErrHijacked = errors.New("h1server: connection hijacked")

var (
	crlf           = []byte("\r\n")
	newlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")
)

// response is the http.ResponseWriter of one request. The head is formatted when the status is
// written, as net/http takes its copy of the header then, and leaves with the first body bytes
// in one write; the framing fields (length, chunked, Connection, Date) are decided when it
// leaves, so that a response the handler completed within one buffer gets a Content-Length.
// Its buffer is pooled and held only until the response ends.
type response struct {
	c      *conn
	req    *http.Request
	body   *body
	header http.Header

	status      int
	wroteHeader bool // the final status is set: no 100 Continue any more
	headSent    bool
	hijacked    bool
	aborted     bool
	isHead      bool
	// contentLength is the length the handler set, or the server computed, -1 when unknown;
	// written counts the body bytes the handler wrote.
	contentLength int64
	written       int64
	chunked       bool
	closeAfter    bool
	// handlerClose says the handler's Connection field, written with the head, says close;
	// connection holds it for the framing otherwise.
	handlerClose bool
	connection   []string
	dateSet      bool
	// sniff says the head has no Content-Type nor Content-Encoding: net/http then sends the
	// type it detects in the first body bytes.
	sniff    bool
	trailers []string
	// bodyDone says the request body was read to its end, once the handler returned.
	bodyDone bool
	final    bool

	bufp    *[]byte
	buf     []byte // the head, then the body bytes not sent yet
	headLen int
	err     error

	iov     [8][]byte
	ext     [192]byte
	line    [24]byte
	trailer []byte
}

func (c *conn) newResponse(req *http.Request, b *body) *response {
	return &response{
		c: c, req: req, body: b, header: make(http.Header), contentLength: -1,
		isHead: req.Method == http.MethodHead,
	}
}

// Header returns the header to send.
func (w *response) Header() http.Header { return w.header }

// WriteHeader sends an informational status at once, and sets the final one.
func (w *response) WriteHeader(code int) {
	if w.hijacked || w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("h1server: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		w.informational(code)
		return
	}
	w.c.wmu.Lock()
	w.wroteHeader = true
	w.c.wmu.Unlock()
	w.status = code
	w.snapshot()
}

// informational writes a 1xx head with the header as it is now, and flushes it.
func (w *response) informational(code int) {
	w.take()
	b := appendStatusLine(w.buf[:0], w.req.ProtoMinor, code)
	b = appendHeader(b, w.header, skipFraming)
	b = append(b, crlf...)
	w.buf = b[:0]
	w.iov[0] = b
	if err := w.c.writev(w.iov[:1]); err != nil {
		w.fail(err)
	}
}

// snapshot formats the head of the final status into the buffer, as the header is now.
func (w *response) snapshot() {
	hdr := w.header
	if cl := hdr.Get("Content-Length"); cl != "" {
		v, err := strconv.ParseInt(cl, 10, 64)
		if err == nil && v >= 0 {
			w.contentLength = v
		} else {
			delete(hdr, "Content-Length")
		}
	}
	switch {
	case w.status == http.StatusNotModified:
		delete(hdr, "Content-Type")
		fallthrough
	case !bodyAllowed(w.status):
		delete(hdr, "Content-Length")
		w.contentLength = -1
	}
	delete(hdr, "Transfer-Encoding")
	_, w.dateSet = hdr["Date"]
	_, typed := hdr["Content-Type"]
	w.sniff = !typed && hdr.Get("Content-Encoding") == "" && bodyAllowed(w.status)
	if v, ok := hdr["Connection"]; ok {
		w.handlerClose = hasToken(v, "close")
		if w.handlerClose {
			w.closeAfter = true
		} else {
			w.connection = v
		}
	}
	for _, v := range hdr["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			if k = http.CanonicalHeaderKey(textproto.TrimString(k)); k != "" && k != "Content-Length" && k != "Transfer-Encoding" && k != "Trailer" {
				w.trailers = append(w.trailers, k)
			}
		}
	}
	w.take()
	b := appendStatusLine(w.buf, w.req.ProtoMinor, w.status)
	skip := skipTrailerPrefix
	if !w.handlerClose {
		skip = skipConnection
	}
	b = appendHeader(b, hdr, skip)
	w.buf, w.headLen = b, len(b)
}

// take gets a write buffer from the pool.
func (w *response) take() {
	if w.bufp == nil {
		w.bufp = w.c.srv.writers.Get().(*[]byte)
		w.buf = (*w.bufp)[:0]
	}
}

// put gives the write buffer back.
func (w *response) put() {
	if w.bufp == nil {
		return
	}
	if cap(w.buf) <= 4*writerSize {
		*w.bufp = w.buf[:0]
	}
	w.c.srv.writers.Put(w.bufp)
	w.bufp, w.buf = nil, nil
}

// Write sends body bytes: buffered while they fit, the head going with the first of them.
func (w *response) Write(p []byte) (int, error) {
	switch {
	case w.hijacked:
		return 0, ErrHijacked
	case w.err != nil:
		return 0, w.err
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	if w.isHead || len(p) == 0 {
		return len(p), nil
	}
	if !w.headSent {
		if len(w.buf)-w.headLen+len(p) <= bufferBeforeHead && len(w.buf)+len(p) <= cap(w.buf) {
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		return w.result(len(p), w.sendHead(p))
	}
	return w.result(len(p), w.writeBody(p))
}

func (w *response) result(n int, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	return n, nil
}

// writeBody sends p after the head, in a chunk when chunked.
func (w *response) writeBody(p []byte) error {
	if w.chunked {
		if len(w.buf)+len(p)+20 <= cap(w.buf) {
			w.buf = appendChunk(w.buf, p)
			return nil
		}
		iov := append(w.iov[:0], w.buf, chunkLine(w.line[:0], len(p)), p, crlf)
		w.buf = w.buf[:0]
		return w.send(iov)
	}
	if len(w.buf)+len(p) <= cap(w.buf) {
		w.buf = append(w.buf, p...)
		return nil
	}
	iov := append(w.iov[:0], w.buf, p)
	w.buf = w.buf[:0]
	return w.send(iov)
}

func (w *response) send(iov [][]byte) error {
	if err := w.c.writev(iov); err != nil {
		w.fail(err)
		return err
	}
	return nil
}

func (w *response) fail(err error) {
	if w.err == nil {
		w.err = err
	}
	w.closeAfter = true
}

// sendHead sends the head with the body bytes buffered and p, and, when the response is
// final, its end.
func (w *response) sendHead(p []byte) error {
	pending := w.buf[w.headLen:]
	n := len(pending) + len(p)
	ext := w.framing(n, pending, p)
	iov := append(w.iov[:0], w.buf[:w.headLen], ext)
	if w.chunked && n > 0 {
		iov = append(iov, chunkLine(w.line[:0], n))
	}
	iov = append(iov, pending, p)
	if w.chunked && n > 0 {
		iov = append(iov, crlf)
	}
	if w.final && w.chunked {
		iov = append(iov, w.lastChunk())
	}
	w.headSent = true
	w.buf, w.headLen = w.buf[:0], 0
	return w.send(iov)
}

// framing returns the fields that frame the response, after the handler's: Date, the
// Content-Length the server computed, Connection, Transfer-Encoding; n is the body bytes at
// hand. It follows net/http's choices.
func (w *response) framing(n int, pending, p []byte) []byte {
	allowed := bodyAllowed(w.status)
	b := w.ext[:0]
	if !w.dateSet {
		b = append(b, "Date: "...)
		b = append(b, date()...)
		b = append(b, crlf...)
	}
	if w.final && len(w.trailers) == 0 && !w.prefixedTrailers() && allowed && w.contentLength == -1 && (!w.isHead || w.written > 0 && w.written <= bufferBeforeHead) {
		w.contentLength = w.written
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, w.written, 10)
		b = append(b, crlf...)
	}
	if w.sniff && n > 0 && !w.isHead {
		sample := pending
		if len(sample) == 0 {
			sample = p
		}
		b = append(b, "Content-Type: "...)
		b = append(b, http.DetectContentType(sample)...)
		b = append(b, crlf...)
	}
	if w.body != nil && (w.body.continueOwed() || w.final && !w.bodyDone) {
		w.closeAfter = true
	}
	if w.req.Close || w.c.srv.shutdown.Load() {
		w.closeAfter = true
	}
	hasCL := w.contentLength != -1
	switch {
	case w.isHead || !allowed || hasCL:
	case w.req.ProtoMinor >= 1:
		w.chunked = true
	default:
		w.closeAfter = true
	}
	switch {
	case w.closeAfter && !w.handlerClose && w.req.ProtoMinor >= 1:
		b = append(b, "Connection: close\r\n"...)
	case !w.closeAfter && w.connection != nil:
		b = appendField(b, "Connection", w.connection)
	case !w.closeAfter && w.req.ProtoMinor == 0:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	if w.chunked {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	return append(b, crlf...)
}

// prefixedTrailers reports whether the handler set trailers under http.TrailerPrefix.
func (w *response) prefixedTrailers() bool {
	for k := range w.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// lastChunk returns the last chunk and the trailer section: the announced trailers with the
// values the header has now, and those set under http.TrailerPrefix.
func (w *response) lastChunk() []byte {
	b := w.trailer[:0]
	b = append(b, "0\r\n"...)
	var t http.Header
	for k, vv := range w.header {
		if kk, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			if t == nil {
				t = http.Header{}
			}
			t[kk] = vv
		}
	}
	for _, k := range w.trailers {
		if vv := w.header[k]; len(vv) > 0 {
			if t == nil {
				t = http.Header{}
			}
			t[k] = append(t[k], vv...)
		}
	}
	b = appendHeader(b, t, skipNone)
	b = append(b, crlf...)
	w.trailer = b
	return b
}

// Flush sends what is buffered, the head included.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush that returns the write's error (http.ResponseController uses it).
func (w *response) FlushError() error {
	if w.hijacked {
		return ErrHijacked
	}
	if w.err != nil {
		return w.err
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		return w.sendHead(nil)
	}
	if len(w.buf) == 0 {
		return nil
	}
	iov := append(w.iov[:0], w.buf)
	w.buf = w.buf[:0]
	return w.send(iov)
}

// finish ends the response once the handler returned: the head if it was not sent, the rest
// of the body, the last chunk and trailers. bodyDone says the request body was read whole.
func (w *response) finish(bodyDone bool) {
	defer w.put()
	w.bodyDone, w.final = bodyDone, true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return
	}
	if !w.headSent {
		_ = w.sendHead(nil)
	} else {
		iov := append(w.iov[:0], w.buf)
		if w.chunked {
			iov = append(iov, w.lastChunk())
		}
		w.buf = w.buf[:0]
		_ = w.send(iov)
	}
	if w.contentLength != -1 && !w.isHead && bodyAllowed(w.status) && w.written != w.contentLength {
		// Fewer bytes than announced: the client waits for the rest.
		w.closeAfter = true
	}
}

// SetReadDeadline sets the deadline of the request body's reads.
func (w *response) SetReadDeadline(t time.Time) error { return w.c.rw.SetReadDeadline(t) }

// SetWriteDeadline sets the deadline of the response's writes.
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.rw.SetWriteDeadline(t) }

// EnableFullDuplex is a no-op: the request body can always be read while the response is
// written.
func (w *response) EnableFullDuplex() error { return nil }

// Hijack hands the connection to the handler, with the bytes read and not yet consumed.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked {
		return nil, nil, ErrHijacked
	}
	if w.wroteHeader && !w.headSent {
		if err := w.sendHead(nil); err != nil {
			return nil, nil, err
		}
	}
	c := w.c
	if w.body != nil {
		// The read buffer goes to the hijacker: no read of the body may touch it after.
		w.body.end()
	}
	c.wmu.Lock()
	w.hijacked = true
	c.wmu.Unlock()
	c.mu.Lock()
	c.kept = true
	c.mu.Unlock()
	w.put()
	br := c.br
	c.br = nil
	_ = c.rw.SetDeadline(time.Time{})
	return c.nc, bufio.NewReadWriter(br, bufio.NewWriter(c.nc)), nil
}

// writev writes the buffers in one system call on plaintext TCP.
func (c *conn) writev(iov [][]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.plain {
		c.bufs = iov
		_, err := c.bufs.WriteTo(c.rw)
		c.bufs = nil
		return err
	}
	// Elsewhere (TLS) the buffers are joined while they fit one record, so that the head and
	// a small body leave in one record and one write.
	total := 0
	for _, b := range iov {
		total += len(b)
	}
	if total <= maxJoined {
		bp := c.srv.joined.Get().(*[]byte)
		joined := (*bp)[:0]
		for _, b := range iov {
			joined = append(joined, b...)
		}
		_, err := c.rw.Write(joined)
		*bp = joined[:0]
		c.srv.joined.Put(bp)
		return err
	}
	for _, b := range iov {
		if len(b) == 0 {
			continue
		}
		if _, err := c.rw.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// maxJoined is the most a write to a connection that is not plaintext TCP joins into one
// buffer: a TLS record's payload.
const maxJoined = 16 << 10

func appendStatusLine(b []byte, minor, code int) []byte {
	if minor >= 1 {
		b = append(b, "HTTP/1.1 "...)
	} else {
		b = append(b, "HTTP/1.0 "...)
	}
	text := http.StatusText(code)
	if text == "" {
		b = append(b, strconv.Itoa(code + 1000)[1:]...)
		b = append(b, " status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
		return append(b, crlf...)
	}
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, text...)
	return append(b, crlf...)
}

// Which keys appendHeader leaves out besides those under http.TrailerPrefix.
const (
	skipNone = iota
	skipTrailerPrefix
	skipConnection
	skipFraming
)

// appendHeader appends the fields of hdr in key order, as http.Header.Write does: keys that
// are not tokens are left out, and CR and LF in values become spaces.
func appendHeader(b []byte, hdr http.Header, skip int) []byte {
	var room [32]string
	keys := room[:0]
	for k := range hdr {
		switch {
		case skip != skipNone && strings.HasPrefix(k, http.TrailerPrefix):
		case skip == skipConnection && k == "Connection":
		case skip == skipFraming && (k == "Content-Length" || k == "Transfer-Encoding"):
		case !isToken(k):
		default:
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = appendField(b, k, hdr[k])
	}
	return b
}

func appendField(b []byte, k string, vv []string) []byte {
	for _, v := range vv {
		b = append(b, k...)
		b = append(b, ": "...)
		if strings.ContainsAny(v, "\r\n") {
			v = newlineToSpace.Replace(v)
		}
		b = append(b, textproto.TrimString(v)...)
		b = append(b, crlf...)
	}
	return b
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if !http1.IsTokenChar(s[i]) {
			return false
		}
	}
	return true
}

// hasToken reports whether a comma-separated list of vv holds token (case-insensitive).
func hasToken(vv []string, token string) bool {
	for _, v := range vv {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(t), token) {
				return true
			}
		}
	}
	return false
}

func appendChunk(b, p []byte) []byte {
	b = strconv.AppendInt(b, int64(len(p)), 16)
	b = append(b, crlf...)
	b = append(b, p...)
	return append(b, crlf...)
}

func chunkLine(b []byte, n int) []byte {
	b = strconv.AppendInt(b, int64(n), 16)
	return append(b, crlf...)
}

// bodyAllowed reports whether a response of status may have a body (RFC 9110 6.4.1).
func bodyAllowed(status int) bool {
	return (status < 100 || status > 199) && status != http.StatusNoContent && status != http.StatusNotModified
}

// dates caches the Date field's value of the current second.
var dates atomic.Pointer[dateValue]

type dateValue struct {
	sec int64
	b   []byte
}

func date() []byte {
	now := time.Now()
	if d := dates.Load(); d != nil && d.sec == now.Unix() {
		return d.b
	}
	d := &dateValue{sec: now.Unix(), b: now.UTC().AppendFormat(nil, http.TimeFormat)}
	dates.Store(d)
	return d.b
}
