// Package metrics holds the data plane's Prometheus metrics: requests by route and status, a
// request latency histogram, upstream errors, mirrors dropped and open downstream connections.
// Per-route counters are resolved once per route and status and then cost no lookup or
// allocation per request.
package metrics
