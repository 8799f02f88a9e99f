// Package accesslog writes the data plane's access log: one line per request (client, request
// ID, Gateway, listener, route, backend, statuses, bytes, durations, TLS, retries, the reason of
// a refusal), as JSON or key=value text with the fields chosen, encoded without reflection on a
// goroutine of its own from a bounded queue, so that logging never blocks a request and a slow
// writer costs dropped, counted lines instead of latency.
package accesslog
