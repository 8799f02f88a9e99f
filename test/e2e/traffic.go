package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Client sends requests to one address whatever the URL says, so that the Host header
// selects the virtual host. It never uses a proxy from the environment.
type Client struct {
	addr string
	http *http.Client
}

// NewClient returns a client of addr (host:port) that reuses connections unless fresh is set.
func NewClient(addr string, fresh bool) *Client {
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	transport := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		},
		DisableKeepAlives:   fresh,
		MaxIdleConnsPerHost: 4,
	}
	return &Client{addr: addr, http: &http.Client{Transport: transport, Timeout: 5 * time.Second}}
}

// NewH2CClient returns a client of addr that speaks HTTP/2 without TLS, with prior knowledge,
// over one connection it keeps (a new one when the server closes it).
func NewH2CClient(addr string) *Client {
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	transport := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		},
		Protocols: &protocols,
	}
	return &Client{addr: addr, http: &http.Client{Transport: transport, Timeout: 5 * time.Second}}
}

// Response is a status code and body.
type Response struct {
	Code int
	Body []byte
}

// Get sends GET path with Host host.
func (c *Client) Get(ctx context.Context, host, path string) (Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+path, http.NoBody)
	if err != nil {
		return Response{}, fmt.Errorf("GET %s%s: %w", host, path, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Response{}, fmt.Errorf("GET %s%s via %s: %w", host, path, c.addr, err)
	}
	defer resp.Body.Close() //nolint:errcheck // read to the end below
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, fmt.Errorf("GET %s%s via %s: read body: %w", host, path, c.addr, err)
	}
	return Response{Code: resp.StatusCode, Body: body}, nil
}

// Echo returns the backend's Echo of a 200 response.
func (r Response) Echo() (Echo, error) {
	if r.Code != http.StatusOK {
		return Echo{}, fmt.Errorf("status %d, body %q", r.Code, truncate(r.Body, 200))
	}
	var e Echo
	if err := json.Unmarshal(r.Body, &e); err != nil {
		return Echo{}, fmt.Errorf("decode backend answer %q: %w", truncate(r.Body, 200), err)
	}
	return e, nil
}

// CloseIdle closes the client's idle connections.
func (c *Client) CloseIdle() { c.http.CloseIdleConnections() }

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// Load sends requests continuously until stopped and counts the ones that fail.
type Load struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	failures   []string
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

// maxRecordedFailures bounds the failure descriptions a Load keeps.
const maxRecordedFailures = 10

// StartLoad runs one worker per client; each sends GET path with Host host every pause and
// calls check on every answer. Requests that fail, or that check refuses, count as failures.
func StartLoad(ctx context.Context, clients []*Client, host, path string, pause time.Duration, check func(Response) error) *Load {
	ctx, cancel := context.WithCancel(ctx)
	l := &Load{cancel: cancel}
	for _, c := range clients {
		l.wg.Go(func() { l.run(ctx, c, host, path, pause, check) })
	}
	return l
}

func (l *Load) run(ctx context.Context, c *Client, host, path string, pause time.Duration, check func(Response) error) {
	t := time.NewTicker(pause)
	defer t.Stop()
	for {
		resp, err := c.Get(ctx, host, path)
		if ctx.Err() != nil {
			return // a request cut short by Stop is no failure
		}
		if err == nil {
			err = check(resp)
		}
		l.record(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (l *Load) record(err error) {
	if err == nil {
		l.ok.Add(1)
		return
	}
	l.failed.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) < maxRecordedFailures {
		l.failures = append(l.failures, time.Now().Format("15:04:05.000")+" "+err.Error())
	}
}

// Counts returns the requests that succeeded and failed so far.
func (l *Load) Counts() (ok, failed int64) { return l.ok.Load(), l.failed.Load() }

// Stop ends the load and returns the counts and the first failures.
func (l *Load) Stop() (ok, failed int64, failures error) {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := make([]error, 0, len(l.failures))
	for _, f := range l.failures {
		errs = append(errs, errors.New(f))
	}
	return l.ok.Load(), l.failed.Load(), errors.Join(errs...)
}
