package forward

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"
)

// maxH2RequestBody bounds a request body received over HTTP/2.
const maxH2RequestBody = 64 << 20

var ctxPool = sync.Pool{New: func() any { return new(fasthttp.RequestCtx) }}

// HTTP returns a net/http handler serving requests that arrive on l over HTTP/2: each request
// is copied onto a fasthttp request and served by the same path as HTTP/1.1.
func (h *Handler) HTTP(l *Listener) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.serveHTTP(w, r, l) })
}

func (h *Handler) serveHTTP(w http.ResponseWriter, r *http.Request, l *Listener) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	if err := fromHTTPRequest(req, w, r); err != nil {
		http.Error(w, "request body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	ctx := ctxPool.Get().(*fasthttp.RequestCtx)
	defer ctxPool.Put(ctx)
	ctx.Init(req, remoteAddr(r.RemoteAddr), nil)
	ctx.Response.Reset()
	h.Serve(ctx, l)
	if r.Method == http.MethodHead {
		ctx.Response.SkipBody = true
	}
	toResponseWriter(w, &ctx.Response)
}

func fromHTTPRequest(out *fasthttp.Request, w http.ResponseWriter, in *http.Request) error {
	out.Header.SetMethod(in.Method)
	out.Header.SetRequestURI(in.URL.RequestURI())
	out.Header.SetProtocol("HTTP/2.0")
	out.Header.SetHost(in.Host)
	for k, vs := range in.Header {
		for _, v := range vs {
			out.Header.Add(k, v)
		}
	}
	if in.Body == nil || in.Body == http.NoBody {
		return nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, in.Body, maxH2RequestBody))
	if err != nil {
		return err
	}
	out.SetBody(body)
	return nil
}

func toResponseWriter(w http.ResponseWriter, in *fasthttp.Response) {
	hdr := w.Header()
	for k, v := range in.Header.All() {
		name := string(k)
		switch strings.ToLower(name) {
		case "connection", "keep-alive", "transfer-encoding", "upgrade", "content-length":
			continue
		}
		hdr.Add(name, string(v))
	}
	if !in.SkipBody {
		hdr.Set("Content-Length", itoa(len(in.Body())))
	}
	w.WriteHeader(in.StatusCode())
	if !in.SkipBody {
		_, _ = w.Write(in.Body())
	}
}

func itoa(n int) string { return uitoa(uint32(n)) }

// remoteAddr parses net/http's RemoteAddr for X-Forwarded-For.
func remoteAddr(s string) net.Addr {
	ap, err := net.ResolveTCPAddr("tcp", s)
	if err != nil {
		return nil
	}
	return ap
}
