package forward

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// errBodyTooLarge ends a request body longer than MaxRequestBodySize.
var errBodyTooLarge = errors.New("request body too large")

// requestBody is the client's request body as the upstream exchange reads it: every read gets
// BodyReadTimeout, the size limit is enforced as bytes arrive, the client's own failures are
// kept apart from the backend's, and trailers the route manages are dropped once the body
// ended. The engine reads it on its own goroutine.
type requestBody struct {
	x       *exchange
	body    io.ReadCloser
	limit   int64 // remaining bytes allowed, negative for no limit
	timeout time.Duration
	// buffered, when set, is the whole body, already read (for mirrors).
	buffered []byte
	// readBy is the read deadline set last, zero before the first read.
	readBy time.Time
	mu     sync.Mutex
	err    error
}

// requestBody returns the request's body for the upstream exchange, nil when it has none.
func (x *exchange) requestBody() *requestBody {
	r := x.r
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	b := &requestBody{x: x, body: r.Body, limit: -1, timeout: x.h.opts.BodyReadTimeout}
	if max := x.h.opts.MaxRequestBodySize; max > 0 {
		b.limit = max
	}
	return b
}

func (b *requestBody) Read(p []byte) (int, error) {
	if b.buffered != nil {
		n := copy(p, b.buffered)
		b.buffered = b.buffered[n:]
		if len(b.buffered) == 0 {
			b.buffered = nil
			b.ended()
			return n, io.EOF
		}
		return n, nil
	}
	if now := time.Now(); b.readBy.IsZero() || b.readBy.Sub(now) < b.timeout-b.timeout/8 {
		// Moved only once it came an eighth of the timeout closer: one call per few reads.
		b.readBy = now.Add(b.timeout)
		_ = b.x.rc.SetReadDeadline(b.readBy)
	}
	n, err := b.body.Read(p)
	if b.limit >= 0 {
		if int64(n) > b.limit {
			b.fail(errBodyTooLarge)
			return 0, errBodyTooLarge
		}
		b.limit -= int64(n)
	}
	switch {
	case errors.Is(err, io.EOF):
		b.ended()
	case err != nil:
		b.fail(err)
	}
	return n, err
}

// readAll reads the whole body, at most max bytes, for the mirrors; the upstream exchange then
// reads it from memory. It returns false when the body is longer than max.
func (b *requestBody) readAll(max int64) (bool, error) {
	if b.x.r.ContentLength < 0 || b.x.r.ContentLength > max {
		return false, nil
	}
	buf := make([]byte, b.x.r.ContentLength)
	_, err := io.ReadFull(b, buf)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	if len(buf) == 0 {
		buf = []byte{}
	}
	b.buffered = buf
	return true, nil
}

// ended runs once the body is read whole: the read deadline is lifted, so that the engine's
// watch for the client closing the connection does not fire on it, and the trailers the route
// manages are dropped.
func (b *requestBody) ended() {
	_ = b.x.rc.SetReadDeadline(time.Time{})
	if b.x.r.Trailer != nil {
		dropManagedTrailers(b.x.r.Trailer, b.x.route)
	}
}

func (b *requestBody) fail(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
}

// failed returns the client's error that ended the body early, nil when there was none.
func (b *requestBody) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// Close is the engine's; the server closes the client's body itself.
func (b *requestBody) Close() error { return nil }
