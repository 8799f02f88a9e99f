package tlsconfig_test

import (
	"testing"

	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

// Tests that swapping the server certificate and the roots between two handshakes takes effect
// on the same listener and configs, with no restart: the CA rotation of the control channel.
func TestRotationWithoutRestart(t *testing.T) {
	t.Parallel()
	oldCA := pkitest.NewCA(t, "cluster.local")
	newCA := pkitest.NewCA(t, "cluster.local")

	serverCert := static(pkitest.SVID(t, oldCA, controllerID))
	serverRoots := roots(oldCA)
	srv := startServer(t, tlsconfig.MTLSServer(serverCert, serverRoots, td, tlsconfig.AuthorizeAny()))

	clientCert := static(pkitest.SVID(t, oldCA, proxyID))
	clientRoots := roots(oldCA)
	client := tlsconfig.MTLSClient(clientCert, clientRoots, td, tlsconfig.AuthorizeAny())

	step := func(name string, wantOK bool) {
		t.Helper()
		res, clientErr := srv.dial(t, client)
		ok := clientErr == nil && res.err == nil
		if ok != wantOK {
			t.Fatalf("%s: accepted = %v, want %v (client %v, server %v)", name, ok, wantOK, clientErr, res.err)
		}
	}

	step("before rotation", true)

	// The controller publishes the overlap bundle and switches its serving certificate.
	serverRoots.Set(pkitest.Bundle(oldCA, newCA))
	serverCert.Set(pkitest.SVID(t, newCA, controllerID))
	step("a client that only trusts the old root refuses the new server certificate", false)

	clientRoots.Set(pkitest.Bundle(oldCA, newCA))
	step("a client with the overlap bundle and an old SVID is accepted", true)

	clientCert.Set(pkitest.SVID(t, newCA, proxyID))
	step("a client with a new SVID is accepted", true)

	// The old root leaves the bundle once its last SVID expired.
	serverRoots.Set(pkitest.Bundle(newCA))
	clientCert.Set(pkitest.SVID(t, oldCA, proxyID))
	step("an old SVID is refused once the old root is dropped", false)

	clientCert.Set(pkitest.SVID(t, newCA, proxyID))
	step("a new SVID is still accepted", true)
}
