package forward

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"

	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

// exchangeH2C forwards the request over HTTP/2 without TLS, for clusters whose endpoints speak
// only that. It converts to and from net/http, which costs allocations this path accepts.
func (h *Handler) exchangeH2C(x *exchange, cl *upstream.Cluster, ep *upstream.Endpoint, deadline time.Time) int {
	ctx := context.Background()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	req, err := toHTTPRequest(ctx, &x.ctx.Request, ep.Address)
	if err != nil {
		return x.fail(fasthttp.StatusBadRequest)
	}
	resp, err := ep.H2C().RoundTrip(req)
	if err != nil {
		return h.upstreamFailed(x, cl, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := h.fromHTTPResponse(&x.ctx.Response, resp); err != nil {
		return h.upstreamFailed(x, cl, err)
	}
	return x.modifyResponse()
}

func toHTTPRequest(ctx context.Context, in *fasthttp.Request, addr string) (*http.Request, error) {
	uri := "http://" + addr + string(in.URI().RequestURI())
	out, err := http.NewRequestWithContext(ctx, string(in.Header.Method()), uri, bytes.NewReader(in.Body()))
	if err != nil {
		return nil, err
	}
	out.Host = string(in.Header.Host())
	for k, v := range in.Header.All() {
		if !bytes.EqualFold(k, []byte(fasthttp.HeaderHost)) {
			out.Header.Add(string(k), string(v))
		}
	}
	out.ContentLength = int64(len(in.Body()))
	return out, nil
}

func (h *Handler) fromHTTPResponse(out *fasthttp.Response, in *http.Response) error {
	out.Reset()
	out.SetStatusCode(in.StatusCode)
	for k, vs := range in.Header {
		for _, v := range vs {
			out.Header.Add(k, v)
		}
	}
	body, err := io.ReadAll(io.LimitReader(in.Body, h.opts.MaxResponseBodySize))
	if err != nil {
		return err
	}
	out.SetBody(body)
	return nil
}
