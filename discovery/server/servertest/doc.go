// Package servertest runs discovery servers and clients for tests: a CA with a controller
// serving certificate, loopback listeners with real TLS, and gRPC connections to them. There is
// no plaintext helper on purpose.
package servertest
