package forward

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"sync/atomic"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// errBackendIdle ends an exchange whose backend sent nothing for BackendIdleTimeout.
var errBackendIdle = errors.New("backend sent nothing within the idle timeout")

// informational relays a 103 Early Hints to the client as it arrives; other 1xx stay between
// the proxy and the backend (the proxy answers Expect itself). An HTTP/1.0 client gets none:
// a server must not send it a 1xx (RFC 9110 15.2), which it would take for the final response.
func (x *exchange) informational(code int, header textproto.MIMEHeader) error {
	if code != http.StatusEarlyHints || x.wrote || !x.r.ProtoAtLeast(1, 1) {
		return nil
	}
	hdr := x.w.Header()
	copyEndToEnd(hdr, http.Header(header))
	x.extendSend()
	x.w.WriteHeader(code)
	for k := range header {
		delete(hdr, k) // hints are not part of the final response
	}
	return nil
}

// relay answers with the backend's response: its end-to-end headers after the route's
// filters, then backend b's, then the route's CORS headers, its status, its body streamed in bounded chunks, and its trailers.
func (x *exchange) relay(resp *http.Response, b *router.Backend, cancel context.CancelCauseFunc) int {
	hdr := x.w.Header()
	copyEndToEnd(hdr, resp.Header)
	if cl, ok := resp.Header["Content-Length"]; ok && len(resp.Trailer) == 0 {
		hdr["Content-Length"] = cl
	}
	if _, ok := resp.Header["Content-Type"]; !ok {
		hdr["Content-Type"] = nil // no guessing: the backend sent none
	}
	for _, m := range x.route.ResponseHeaders {
		modifyHeaders(hdr, m)
	}
	if b.Filters != nil {
		for _, m := range b.Filters.ResponseHeaders {
			modifyHeaders(hdr, m)
		}
	}
	if c := x.route.CORS; c != nil {
		x.corsResponse(hdr, c)
	}
	dropFilteredTrailers(resp.Trailer, x.route, b)
	var announced map[string]bool
	if len(resp.Trailer) > 0 {
		announced = make(map[string]bool, len(resp.Trailer))
		names := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			names = append(names, k)
			announced[k] = true
		}
		hdr[headerTrailer] = []string{strings.Join(names, ", ")}
	}
	x.writeHeader(resp.StatusCode)
	if resp.Body == http.NoBody {
		return resp.StatusCode
	}
	if err := x.copyResponse(resp, cancel); err != nil {
		return resp.StatusCode
	}
	dropFilteredTrailers(resp.Trailer, x.route, b) // the trailers as they arrived
	for k, vs := range resp.Trailer {
		if announced[k] {
			hdr[k] = vs
		} else {
			hdr[http.TrailerPrefix+k] = vs // arrived unannounced (HTTP/2 allows it)
		}
	}
	return resp.StatusCode
}

// copyResponse streams the response body to the client. Every read from the backend gets
// BackendIdleTimeout and every write to the client SendTimeout. A body whose size is known,
// fits one buffer and arrives in one read leaves with the end of the response; any other is
// flushed chunk by chunk, as it arrives. A backend failure mid-body aborts the client's response, so that it
// is never taken for a complete one.
func (x *exchange) copyResponse(resp *http.Response, cancel context.CancelCauseFunc) error {
	if resp.ContentLength >= spliceMin && len(resp.Trailer) == 0 {
		src, srcOK := resp.Body.(io.WriterTo)
		dst, dstOK := x.w.(io.ReaderFrom)
		if srcOK && dstOK {
			return x.spliceResponse(src, dst, cancel)
		}
	}
	bp := x.h.buffer()
	defer x.h.release(bp)
	buf := *bp
	streaming := resp.ContentLength < 0 || resp.ContentLength > int64(len(buf))
	timeout := x.h.opts.BackendIdleTimeout
	idle := time.AfterFunc(timeout, func() { cancel(errBackendIdle) })
	defer idle.Stop()
	for {
		n, rerr := resp.Body.Read(buf)
		// The backend's clock stops while the client takes the bytes: a client slow to read
		// is the send timeout's to judge, not a sign of an idle backend.
		idle.Stop()
		if n > 0 {
			x.extendSend()
			if _, err := x.w.Write(buf[:n]); err != nil {
				x.reason = reasonSendTimeout
				return err
			}
			x.bytes += int64(n)
			if streaming || x.bytes < resp.ContentLength {
				if err := x.rc.Flush(); err != nil {
					x.reason = reasonSendTimeout
					return err
				}
			}
		}
		switch {
		case errors.Is(rerr, io.EOF):
			return nil
		case rerr != nil && x.r.Context().Err() != nil:
			x.reason = reasonClientClosed
			return rerr
		case rerr != nil:
			x.reason = reasonUpstreamBody
			x.abort = true
			return rerr
		}
		idle.Reset(timeout)
	}
}

// spliceMin is the smallest body of a declared length that the engine moves itself.
const spliceMin = 64 << 10

// spliceResponse hands a large body of a declared length to the engine: the native client's
// body gives its connection, in slices, to the native server's ReadFrom, which the kernel
// moves (splice) where both sides are plain TCP. Each slice re-arms the client's SendTimeout
// and the backend's clock, as each chunk of copyResponse does; a failure aborts the response as
// there. A slice both reads and sends, so the backend's clock for a slice is BackendIdleTimeout
// plus SendTimeout: a client that stops reading meets its send timeout first, and a stalled
// backend is cut at most one send timeout later than copyResponse would cut it.
func (x *exchange) spliceResponse(src io.WriterTo, dst io.ReaderFrom, cancel context.CancelCauseFunc) error {
	timeout := x.h.opts.BackendIdleTimeout + x.h.opts.SendTimeout
	var idle atomic.Bool
	timer := time.AfterFunc(timeout, func() {
		idle.Store(true)
		cancel(errBackendIdle)
	})
	defer timer.Stop()
	n, err := src.WriteTo(&sliceWriter{x: x, dst: dst, timer: timer, timeout: timeout})
	x.bytes += n
	switch {
	case err == nil:
		return nil
	case idle.Load():
		x.reason = reasonUpstreamBody
		x.abort = true
	case x.r.Context().Err() != nil:
		x.reason = reasonClientClosed
	case isTimeout(err):
		x.reason = reasonSendTimeout
	default:
		x.reason = reasonUpstreamBody
		x.abort = true
	}
	return err
}

// sliceWriter is the client's side of spliceResponse: every slice moved re-arms the timeouts.
type sliceWriter struct {
	x       *exchange
	dst     io.ReaderFrom
	timer   *time.Timer
	timeout time.Duration
}

func (s *sliceWriter) ReadFrom(r io.Reader) (int64, error) {
	s.timer.Reset(s.timeout)
	s.x.extendSend()
	return s.dst.ReadFrom(r)
}

func (s *sliceWriter) Write(p []byte) (int, error) {
	s.timer.Reset(s.timeout)
	s.x.extendSend()
	return s.x.w.Write(p)
}
