package h1server

import (
	"io"
	"net"
	"net/http"
	"sync"
)

// ReadFrom sends what src holds as the body. A response of a declared length on a plaintext
// connection sends its head and the bytes buffered, then hands src to the socket's ReadFrom,
// which moves a TCP source with splice(2), never through user space (the upstream client's
// body gives out its connection this way, in slices). Any other response copies src through
// Write. It never sends more than the declared length.
func (w *response) ReadFrom(src io.Reader) (int64, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	tcp, ok := w.c.rw.(*net.TCPConn)
	if !ok || !w.c.plain || w.hijacked || w.err != nil || w.isHead || w.chunked || w.contentLength < 0 || !bodyAllowed(w.status) {
		bp := copyBuffers.Get().(*[]byte)
		defer copyBuffers.Put(bp)
		return io.CopyBuffer(writeOnly{w}, src, *bp)
	}
	if err := w.FlushError(); err != nil {
		return 0, err
	}
	left := w.contentLength - w.written
	if lr, ok := src.(*io.LimitedReader); ok {
		// Bounded in place: the socket splices only from a LimitedReader over a connection.
		lr.N = min(lr.N, left)
	} else {
		src = &io.LimitedReader{R: src, N: left}
	}
	n, err := tcp.ReadFrom(src)
	w.written += n
	if err != nil {
		w.fail(err)
	}
	return n, err
}

// copyBuffers hold the buffers of ReadFrom's copies through Write.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// writeOnly hides a response's ReadFrom from io.Copy.
type writeOnly struct{ w *response }

func (o writeOnly) Write(p []byte) (int, error) { return o.w.Write(p) }
