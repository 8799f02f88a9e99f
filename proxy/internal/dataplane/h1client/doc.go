// Package h1client is the native engine's upstream HTTP/1.1 client: an http.RoundTripper per
// endpoint with its own pool of keep-alive connections and no goroutine per connection. The
// exchange runs on the caller's goroutine (one writev for a head and a small body, a pump
// goroutine for a body not at hand), responses are framed strictly by http1.ParseResponse, and
// a connection goes back to its pool only after a whole response with a body to a request
// sent whole before the answer came, with no byte left over; there it rests for a quarantine,
// and is peeked at, before it carries another request.
package h1client
