package h1server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// serveRequest serves the head in c.head and reports whether the connection may read another
// request: not after a refusal, a hijack, a handler's panic, a response that closes the
// connection, or a body left unread (its rest would be read as the next request).
func (c *conn) serveRequest() bool {
	ctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	c.cancel = cancel
	c.mu.Unlock()
	defer func() {
		cancel()
		c.mu.Lock()
		c.cancel = nil
		c.mu.Unlock()
	}()
	req, bd, err := c.newRequest(ctx)
	if err != nil {
		var refused *http1.Error
		if errors.As(err, &refused) {
			c.refuse(refused)
		}
		return false
	}
	w := c.newResponse(req, bd)
	if bd != nil {
		bd.w = w
	}
	h := c.srv.handler
	if req.RequestURI == "*" && req.Method == http.MethodOptions {
		h = optionsHandler{}
	}
	c.runHandler(h, w, req)
	if w.hijacked || w.aborted || c.isGone() {
		// A goroutine of the handler's may still read the body (a transport's RoundTrip may
		// close it after returning): end it before the connection gives its read buffer back.
		// A hijack ended it already.
		if bd != nil && !w.hijacked {
			bd.end()
		}
		w.put()
		return false
	}
	done := bd == nil || bd.end()
	w.finish(done)
	if !done && w.err == nil {
		// The client may still be sending the body: closing with its bytes unread would
		// reset the connection, and could destroy the answer before the client read it.
		c.linger()
	}
	return done && !w.closeAfter && w.err == nil
}

// runHandler calls the handler; a panic aborts the response (the connection closes without
// completing it), and is logged unless it is http.ErrAbortHandler.
func (c *conn) runHandler(h http.Handler, w *response, req *http.Request) {
	defer func() {
		v := recover()
		if v == nil || w.hijacked {
			return
		}
		w.aborted = true
		if v != http.ErrAbortHandler { //nolint:errorlint // the value panicked with, as net/http compares it
			c.srv.opts.Log.Error(fmt.Errorf("%v", v), "Handler panicked", "remoteAddr", c.remote)
		}
	}()
	h.ServeHTTP(w, req)
}

// optionsHandler answers OPTIONS *, which net/http's server answers itself, never calling the
// handler: 200 with no body, the request body read up to 4 KiB.
type optionsHandler struct{}

func (optionsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", "0")
	if r.ContentLength != 0 {
		_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 4<<10))
	}
}

// What a peek at the client's socket found.
const (
	peekOpen = iota
	peekEOF
	peekReset
)

// peek looks at the client's socket without reading or waiting.
func (c *conn) peek() int {
	if c.raw == nil {
		return peekOpen
	}
	found := peekOpen
	_ = c.raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n == 0 && err == nil:
			found = peekEOF
		case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
			found = peekReset
		}
	})
	return found
}

// ClientGone peeks at the client's socket without waiting: the end of its stream or a reset
// means the client went away, which cancels the request's context. A client that only
// half-closed after its request looks the same; it gets no answer once the handler gave up
// on it (rather than an empty one that would look whole).
func (c *conn) ClientGone() bool {
	if c.peek() == peekOpen {
		return false
	}
	c.mu.Lock()
	c.gone = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return true
}

// isGone reports whether ClientGone found the client gone.
func (c *conn) isGone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gone
}
