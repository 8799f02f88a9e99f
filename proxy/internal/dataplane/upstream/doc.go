// Package upstream keeps the connections to backends: one keep-alive pool per endpoint address
// (an HTTP/1.1 transport, and an h2c transport created on first use), bounded in size and idle
// time and reused across routing tables while the endpoint stays, and per table a Set of
// clusters that hand out their endpoints round-robin. A pooled HTTP/1.1 connection goes back to
// its pool only after its response was read to the end; anything else closes it, and so does
// an answer without a body by method or status, or one that came before the request was
// written whole. A connection back in its pool rests for a quarantine before it carries
// another request: Go's Transport gets this through a guard on its connections (guard.go). Each endpoint
// admits its requests in flight through a limiter (a pending cap, a pending timeout and a
// per-client share), so no request waits for a connection without bound.
package upstream
