// Package dataplane is the proxy's HTTP data plane: it implements the agent's Applier by
// deriving from each complete resource set an immutable router table (only what changed is
// compiled), binding and unbinding listeners to match it, and swapping the table in with one
// atomic pointer store, so requests in flight finish on the table they started with. Shutdown
// drains every listener.
package dataplane
