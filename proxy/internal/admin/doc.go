// Package admin is the proxy's read-only admin port: what routing snapshot the proxy holds (its
// version, content hash, when it was applied and every resource, private keys redacted) and,
// when asked for, the Go runtime profiles. It listens on the loopback by default, reached with
// kubectl port-forward, and anywhere else only behind a bearer token read from a file, since a
// snapshot names every route, backend and certificate of its scope.
package admin
