// Package forward is the request path of the data plane. It validates each request, routes it
// through the current table, applies the route's filters, answers redirects and fixed
// statuses, picks a weighted backend and a round-robin endpoint, and builds the upstream
// request itself from validated parts: method, normalized target, Host, the body's framing and
// the headers it does not own. Bodies stream both ways in bounded chunks with per-read and
// per-write inactivity deadlines, so memory per request is bounded by its buffers, not by its
// body. It also tunnels WebSocket upgrades once the backend answers 101, relays 1xx and
// trailers, and sends fire-and-forget mirror copies with bounded concurrency.
package forward
