// Package tlsconfig builds the TLS configurations of the discovery channel on go-spiffe: the
// bootstrap listener and its client (server authentication only) and the mandatory-mTLS stream.
// Peers are verified by x509svid.Verify and authorized by spiffetls authorizers, with our
// stricter rules as authorizers on top (an extended key usage per direction, a SPIFFE ID with a
// path, the bootstrap server's DNS name) and TLS 1.3 at least. Each handshake fetches the current
// certificate and trust bundle from a source, so rotating the CA or a serving certificate needs
// no restart.
package tlsconfig
