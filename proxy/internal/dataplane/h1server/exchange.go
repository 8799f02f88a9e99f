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
	defer cancel()
	c.mu.Lock()
	c.cancel = cancel
	c.mu.Unlock()
	req, bd, err := c.newRequest(ctx)
	var refused *http1.Error
	if errors.As(err, &refused) {
		c.refuse(refused)
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
	if w.hijacked || w.aborted {
		w.put()
		return false
	}
	done := bd == nil || bd.end()
	w.finish(done)
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

// ClientGone peeks at the client's socket without waiting: end of stream or a reset means the
// client went away, which also cancels the request's context.
func (c *conn) ClientGone() bool {
	if c.raw == nil {
		return false
	}
	gone := false
	_ = c.raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = n == 0 && err == nil || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	})
	if gone {
		c.mu.Lock()
		cancel := c.cancel
		c.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	}
	return gone
}
