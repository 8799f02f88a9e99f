package forward

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// DefaultMaxRetryBodySize is the largest request body a retried request may have.
const DefaultMaxRetryBodySize = 64 << 10

// maxRetryDrain is how much of a response that is retried is read to keep its connection; a
// response announcing more closes the connection instead.
const maxRetryDrain = 4 << 10

// retryPolicy returns the route's retry policy when the request may be sent more than once,
// nil otherwise. A request is retried only when its method is idempotent (RFC 9110 9.2.2:
// GET, HEAD, OPTIONS, TRACE, PUT, DELETE), since the route's retry stanza cannot say that a
// POST or PATCH is safe to repeat and a backend may have acted on the first attempt; when it
// is no upgrade; and when its body is absent or of a known length of at most MaxRetryBodySize
// without trailers, so that it is read whole before the first attempt and every attempt sends
// it from memory. A streamed body is never replayed.
func (x *exchange) retryPolicy(body *requestBody, upgrade bool) *router.Retry {
	p := x.route.Retry
	if p == nil || upgrade || !idempotent(x.r.Method) {
		return nil
	}
	if body != nil && (x.r.ContentLength < 0 || x.r.ContentLength > x.h.opts.MaxRetryBodySize || len(x.r.Trailer) > 0) {
		return nil
	}
	return p
}

// RetryStaleConnection is the retries_total outcome of a request the engine sent once more,
// on a new connection, because the reused connection it went out on ended (closed or reset by
// the backend) before any byte of an answer: the backend closed an idle connection as the
// request left, and cannot have acted on it.
const RetryStaleConnection = "stale_connection"

// staleRetry says whether a request may go once more when its reused connection ends before
// any byte of an answer, whatever the route's retry policy: when its method is idempotent, it
// is no upgrade, and its body is absent or held in memory (replayable).
func staleRetry(method string, upgrade, replayable bool) bool {
	return replayable && !upgrade && idempotent(method)
}

// markIdempotent tells Go's Transport that a PUT or DELETE may be sent again, as it sends a
// GET again: an Idempotency-Key without a value, which neither engine writes. The native
// engine retries them by its own rule.
func markIdempotent(h http.Header, method string) {
	if method != http.MethodPut && method != http.MethodDelete {
		return
	}
	if _, ok := h["Idempotency-Key"]; !ok {
		h["Idempotency-Key"] = nil
	}
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// retriable says whether an attempt's outcome calls for another: a response with one of the
// policy's codes, or a failed exchange that is the backend's or the network's (a refused or
// reset connection, a broken response, the route's backend request timeout). A failed TLS
// handshake fails the same way again, the request timeout ends the request, and a client that
// left wants nothing more.
func (x *exchange) retriable(ctx context.Context, resp *http.Response, err error, p *router.Retry) bool {
	if x.r.Context().Err() != nil {
		return false
	}
	if err == nil {
		return p.RetryStatus(resp.StatusCode)
	}
	if isTLS(err) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) || isTimeout(err) {
		return !x.pastRequestDeadline(time.Now())
	}
	return true
}

func (x *exchange) pastRequestDeadline(t time.Time) bool {
	rt := x.route.RequestTimeout
	return rt > 0 && !t.Before(x.start.Add(rt))
}

// backoff returns the wait before retry number n+1: the policy's backoff doubled n times,
// at most ten times the backoff, plus a random jitter of up to half of it, so a retry never
// goes before the configured minimum. It returns false when the wait would reach past the
// route's request timeout: the request then ends with the outcome it has.
func (x *exchange) backoff(p *router.Retry, n int) (time.Duration, bool) {
	wait := p.Backoff
	for i := 0; i < n && wait < 10*p.Backoff; i++ {
		wait *= 2
	}
	wait = min(wait, 10*p.Backoff)
	if half := uint64(wait / 2); half > 0 {
		wait += time.Duration(x.h.opts.Rand() % half) //nolint:gosec // less than wait
	}
	return wait, !x.pastRequestDeadline(time.Now().Add(wait))
}

// sleep waits d, or until the client leaves, when it returns false.
func (x *exchange) sleep(d time.Duration) bool {
	if d <= 0 {
		return x.r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-x.r.Context().Done():
		return false
	}
}

// discard ends a response that is retried: a short body is read so that the connection is
// reused, a longer one closes it.
func discard(resp *http.Response) {
	if resp.ContentLength >= 0 && resp.ContentLength <= maxRetryDrain {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxRetryDrain))
	}
	_ = resp.Body.Close()
}
