// Package http1 is the native engine's HTTP/1.1 codec: strict parsers of request and response
// heads and of chunked bodies, over the caller's buffers and with no allocation per field, and
// the writers of the same. It refuses what RFC 9110 and RFC 9112 let a server refuse rather than
// repair it; net/http is its oracle in the differential fuzz tests, and every input it refuses
// that net/http accepts is listed, with its reason, in docs/http1-engine.md.
package http1
