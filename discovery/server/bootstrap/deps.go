package bootstrap

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"

	"coxswain.dev/coxswain/discovery/pki"
)

// Errors an Authenticator wraps to say why a token failed. An error that wraps none of them is
// treated as ErrUnauthenticated.
var (
	// ErrUnauthenticated: the token is garbage, expired, of the wrong audience, or not a
	// ServiceAccount token.
	ErrUnauthenticated = errors.New("bootstrap: token not authenticated")
	// ErrPodMismatch: the token is bound to no pod, or to a pod that no longer exists, has
	// another UID or does not run.
	ErrPodMismatch = errors.New("bootstrap: token not bound to a live pod")
	// ErrUnavailable: the token could not be reviewed now (API server unreachable, throttled).
	ErrUnavailable = errors.New("bootstrap: token review unavailable")
)

// Principal is the identity a token authenticates.
type Principal struct {
	Namespace      string
	ServiceAccount string
	PodName        string
	PodUID         string
}

// String returns "namespace/serviceaccount", or "unauthenticated" for the zero Principal.
func (p Principal) String() string {
	if p.Namespace == "" && p.ServiceAccount == "" {
		return "unauthenticated"
	}
	return p.Namespace + "/" + p.ServiceAccount
}

// Authenticator reviews a projected ServiceAccount token: audience coxswain-discovery requested
// and returned, a ServiceAccount username, and a live bound pod. Its errors wrap ErrUnauthenticated,
// ErrPodMismatch or ErrUnavailable and must never contain the token. With ErrPodMismatch it
// returns the principal the token authenticated, so the refusal names it.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Principal, error)
}

// Allowlist says which ServiceAccounts may hold an SVID: the shared proxy ServiceAccount of the
// install namespace and the expected ServiceAccount of every dedicated Gateway.
type Allowlist interface {
	Allowed(namespace, serviceAccount string) bool
}

// CASource supplies the CA that signs now and the trust bundle handed to proxies.
type CASource interface {
	// Current returns the signing CA and the bundle. An error means there is no usable CA, and
	// bootstrap fails closed with UNAVAILABLE.
	Current() (*pki.CA, *pki.Bundle, error)
}

// Rejection describes one refused bootstrap.
type Rejection struct {
	// Principal is the authenticated identity, or the zero Principal when the token was not
	// (yet) authenticated.
	Principal Principal
	Reason    Reason
	Code      codes.Code
	// Message is a human-readable detail; it never holds the token or the CSR.
	Message string
	// Peer is the remote address of the connection.
	Peer string
	// Suppressed counts the refusals of the same reason and principal that were neither logged
	// nor reported since the previous one that was.
	Suppressed int
}

// Reporter is told about every rejection, for example to record a BootstrapRejected Warning
// event. It must not block.
type Reporter interface {
	BootstrapRejected(ctx context.Context, r Rejection)
}

// StaticCA returns a CASource that always answers ca and bundle.
func StaticCA(ca *pki.CA, bundle *pki.Bundle) CASource { return staticCA{ca: ca, bundle: bundle} }

type staticCA struct {
	ca     *pki.CA
	bundle *pki.Bundle
}

func (s staticCA) Current() (*pki.CA, *pki.Bundle, error) { return s.ca, s.bundle, nil }

type nopReporter struct{}

func (nopReporter) BootstrapRejected(context.Context, Rejection) {}
