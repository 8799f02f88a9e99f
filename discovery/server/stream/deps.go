package stream

import (
	"crypto/x509"
	"errors"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// ErrUnknownGateway is what a ScopeAuthority wraps when a Gateway has no dedicated proxy: it
// does not exist, is not Coxswain's, or is served by the shared pool.
var ErrUnknownGateway = errors.New("stream: unknown gateway")

// ScopeAuthority tells which proxy may subscribe to a Gateway's scope. The operator answers from
// cluster state: the ServiceAccount of the Gateway's dedicated proxy is "<gateway>-<gatewayclass>"
// in the Gateway's namespace.
type ScopeAuthority interface {
	// ExpectedServiceAccount returns the ServiceAccount, in namespace, whose proxy may subscribe
	// to Gateway namespace/name. It returns an error wrapping ErrUnknownGateway when no proxy
	// may; any other error means the answer is not known now and the subscription is refused as
	// UNAVAILABLE (live streams are kept). It is called under the server's session lock and
	// before every send, so it must answer from memory and never call back into the Server.
	ExpectedServiceAccount(namespace, name string) (string, error)
}

// Identity is the verified identity of a stream peer.
type Identity struct {
	ID             spiffeid.ID
	Namespace      string
	ServiceAccount string
	// NotAfter is when the stream closes: the earliest expiry in the peer's chain, and never
	// later than the listener's session lifetime after the stream opened.
	NotAfter time.Time
	// chain is the verified peer chain, verified again when the trust bundle changes.
	chain []*x509.Certificate
}
