package forward

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
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
	// whole, when set, is the whole body, read into memory for retries or mirrors.
	whole []byte
	// pending is what was read from the client and not yet handed to the engine: the rest of
	// whole, or the part read before the budget refused more.
	pending []byte
	// streamed says an attempt to buffer the body stopped short; the body streams.
	streamed bool
	// reserved is what the body holds of the buffer budget; refs counts the holders of whole
	// (the exchange and the mirror copies in flight), the last of which gives it back.
	reserved int64
	refs     atomic.Int32
	budget   *bufferBudget
	// done says the body was read to its end; set on the engine's goroutine. read counts the
	// bytes read from the client.
	done atomic.Bool
	read atomic.Int64
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
	b := &requestBody{x: x, body: r.Body, limit: -1, timeout: x.h.opts.BodyReadTimeout, budget: &x.h.budget}
	b.refs.Store(1)
	if max := x.h.opts.MaxRequestBodySize; max > 0 {
		b.limit = max
	}
	return b
}

func (b *requestBody) Read(p []byte) (int, error) {
	if len(b.pending) > 0 {
		n := copy(p, b.pending)
		b.pending = b.pending[n:]
		if len(b.pending) == 0 && b.whole != nil {
			return n, io.EOF
		}
		return n, nil
	}
	if b.whole != nil {
		return 0, io.EOF
	}
	return b.readClient(p)
}

// readClient reads from the client's body with the read deadline and the size limit.
func (b *requestBody) readClient(p []byte) (int, error) {
	if now := time.Now(); b.readBy.IsZero() || b.readBy.Sub(now) < b.timeout-b.timeout/8 {
		// Moved only once it came an eighth of the timeout closer: one call per few reads.
		b.readBy = now.Add(b.timeout)
		_ = b.x.rc.SetReadDeadline(b.readBy)
	}
	n, err := b.body.Read(p)
	b.read.Add(int64(n))
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

// buffer reads the whole body into memory, for retries or mirrors, when its length is known
// and at most max; the upstream exchange then reads it from memory. Memory grows as bytes
// arrive, never ahead of them, and every growth is taken from the proxy's buffer budget. It
// returns false when the body is not buffered: unknown or longer than max, or (budget) the
// budget refused it, when what was read so far goes out first and the rest streams.
func (b *requestBody) buffer(max int64) (ok, budget bool, err error) {
	switch want := b.x.r.ContentLength; {
	case b.whole != nil:
		return true, false, nil
	case b.streamed:
		return false, true, nil
	case want < 0 || want > max:
		return false, false, nil
	}
	buf, err := b.readGrowing(b.x.r.ContentLength)
	if err != nil {
		return false, false, err
	}
	b.pending = buf
	if int64(len(buf)) < b.x.r.ContentLength {
		b.streamed = true
		return false, true, nil
	}
	b.whole = buf
	b.ended()
	return true, false, nil
}

// readGrowing reads up to want bytes, doubling the buffer from 512 bytes as it fills and
// taking each growth from the budget; it stops short when the budget refuses one.
func (b *requestBody) readGrowing(want int64) ([]byte, error) {
	var buf []byte
	for int64(len(buf)) < want {
		if len(buf) == cap(buf) {
			size := min(want, max(512, 2*int64(len(buf))))
			if !b.budget.take(size - b.reserved) {
				return buf, nil
			}
			b.reserved = size
			next := make([]byte, len(buf), size)
			copy(next, buf)
			buf = next
		}
		n, err := b.readClient(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case errors.Is(err, io.EOF):
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
	return buf, nil
}

// hold counts one more holder of the buffered body (a mirror copy); each holder calls unref.
func (b *requestBody) hold() { b.refs.Add(1) }

// unref ends one holder's use of the buffered body; the last gives the budget back.
func (b *requestBody) unref() {
	if b.refs.Add(-1) == 0 && b.reserved > 0 {
		b.budget.give(b.reserved)
	}
}

// ended runs once the body is read whole: the read deadline is lifted, so that the engine's
// watch for the client closing the connection does not fire on it, and the trailers the route
// manages are dropped.
func (b *requestBody) ended() {
	if !b.done.CompareAndSwap(false, true) {
		return
	}
	_ = b.x.rc.SetReadDeadline(time.Time{})
	if t := b.x.r.Trailer; t != nil {
		dropManagedTrailers(t, b.x.route)
		if !b.x.h.opts.AllowUnderscoresInHeaders {
			// The trailers as they arrived, announced or not.
			b.x.h.opts.Metrics.DroppedFields(droppedUnderscore, dropUnderscoreFields(t))
		}
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

// bufferBudget is the memory the whole proxy may hold in buffered retry and mirror bodies.
type bufferBudget struct {
	max  int64
	used atomic.Int64
}

// take reserves n bytes and reports whether they fit.
func (g *bufferBudget) take(n int64) bool {
	if g.used.Add(n) > g.max {
		g.used.Add(-n)
		return false
	}
	return true
}

// give returns n bytes take reserved.
func (g *bufferBudget) give(n int64) { g.used.Add(-n) }
