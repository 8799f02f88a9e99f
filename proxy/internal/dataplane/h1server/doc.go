// Package h1server is the native engine's HTTP/1.1 server: one goroutine per connection and
// none per request, heads parsed by the http1 codec, requests handed to the listener's
// http.Handler as net/http's server would hand them, and read and write buffers taken from
// pools only while bytes are in flight, so that an idle keep-alive connection holds none.
package h1server
