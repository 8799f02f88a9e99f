// Package servingcert keeps the controller's own discovery serving certificate: issued from the
// discovery CA for the controller's SPIFFE ID and the DNS names of the discovery Service,
// short-lived, renewed in-process at half its life and at once after a CA change, and handed to
// the listeners per handshake as a tlsconfig.CertificateSource.
package servingcert
