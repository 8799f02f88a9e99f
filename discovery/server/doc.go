// Package server runs the two discovery listeners of the controller: bootstrap (server-auth TLS,
// package bootstrap) and stream (mTLS, package stream). It owns their lifecycle: listen, serve,
// and on shutdown close live streams and stop gracefully within a deadline. There is no
// plaintext listener.
package server
