package upstream

import (
	"context"
	"net"
	"net/http"
)

// H2C returns the endpoint's HTTP/2 cleartext transport, created on first use: one
// multiplexed connection carries every request to the endpoint.
func (ep *Endpoint) H2C() *http.Transport {
	if t := ep.h2c.Load(); t != nil {
		return t
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	dialer := &net.Dialer{Timeout: ep.opts.DialTimeout}
	t := &http.Transport{
		Protocols:           &protocols,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     ep.opts.MaxIdleConnDuration,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, ep.Address)
		},
	}
	if !ep.h2c.CompareAndSwap(nil, t) {
		return ep.h2c.Load()
	}
	return t
}
