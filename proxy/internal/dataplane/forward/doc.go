// Package forward is the request path of the data plane: it routes each request through the
// current table, applies the route's filters, answers redirects and fixed statuses, picks a
// weighted backend and a round-robin endpoint, and exchanges the request over a pooled
// keep-alive connection, reusing the server's request and response objects so the hot path
// allocates nothing. It also tunnels WebSocket upgrades, sends fire-and-forget mirror copies
// with bounded concurrency, talks h2c to clusters that ask for it, and adapts HTTP/2
// requests from net/http onto the same path.
package forward
