// Package tlsconfig builds the TLS configurations of the discovery channel: the bootstrap
// listener and its client (server authentication only) and the mandatory-mTLS stream. Each
// handshake fetches the current certificate and trust bundle from a source, so rotating the
// CA or a serving certificate needs no restart, and each peer must carry one SPIFFE ID.
package tlsconfig
