// Package dataplane is the proxy's HTTP data plane: it implements the agent's Applier by
// compiling each complete resource set into an immutable router table, binding and unbinding
// listeners to match it, and swapping the table in with one atomic pointer store, so requests
// in flight finish on the table they started with. Shutdown drains every listener.
package dataplane
