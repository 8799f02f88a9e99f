package encode_test

import (
	"testing"

	"coxswain.dev/coxswain/internal/encode"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/snapshot"
)

// Tests that a listener's client certificate validation reaches the wire with its CA
// certificates and mode, and that a listener without one asks for no client certificate.
func TestListenerClientValidation(t *testing.T) {
	const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	l := &snapshot.Listener{Name: "default/web/443", Gateway: "default/web", Port: 443, Protocol: "HTTPS"}
	if got := encode.Listener(l).GetClientValidation(); got != nil {
		t.Fatalf("listener without validation encodes %v", got)
	}
	l.ClientValidation = &graph.FrontendValidation{
		CACertificateRefs: []string{"default/client-ca"},
		CACertificates:    graph.CABundle(pem),
		InsecureFallback:  true,
	}
	got := encode.Listener(l).GetClientValidation()
	if string(got.GetCaCertificatesPem()) != pem || !got.GetInsecureFallback() {
		t.Fatalf("encoded validation = %q, insecure fallback %t", got.GetCaCertificatesPem(), got.GetInsecureFallback())
	}
}
