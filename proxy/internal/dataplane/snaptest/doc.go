// Package snaptest builds routing resources and resource sets for the data plane's tests and
// benchmarks: listeners, routes, clusters pointing at test servers and self-signed certificates.
package snaptest
