package stream

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reason is the machine-readable cause of a refused or closed stream, used as a metric label.
type Reason string

// The reasons a stream is refused or closed by the server.
const (
	ReasonNoPeerIdentity     Reason = "NoPeerIdentity"
	ReasonMethodNotAllowed   Reason = "MethodNotAllowed"
	ReasonNoSubscribe        Reason = "NoSubscribe"
	ReasonSubscribeTimeout   Reason = "SubscribeTimeout"
	ReasonWireVersion        Reason = "WireVersionMismatch"
	ReasonInvalidSubscribe   Reason = "InvalidSubscribe"
	ReasonScopeNotAuthorized Reason = "ScopeNotAuthorized"
	ReasonScopeUnknown       Reason = "ScopeAuthorityUnavailable"
	ReasonProtocolViolation  Reason = "ProtocolViolation"
	ReasonRevoked            Reason = "Revoked"
	ReasonCertificateExpired Reason = "CertificateExpired"
	// ReasonCertificateUntrusted closes a stream whose chain no longer verifies against the bundle.
	ReasonCertificateUntrusted Reason = "CertificateUntrusted"
	ReasonSuperseded           Reason = "Superseded"
	ReasonTooManyStreams       Reason = "TooManyStreams"
	// ReasonTooManyConnections counts connections closed at accept by the listener's cap.
	ReasonTooManyConnections Reason = "TooManyConnections"
	// ReasonTooManyConnectionsFromSource counts connections closed at accept because their
	// source address held its share of the listener.
	ReasonTooManyConnectionsFromSource Reason = "TooManyConnectionsFromSource"
	// ReasonTooManyBytesInFlight closes a stream whose push would take its identity's snapshots
	// in flight beyond their byte budget.
	ReasonTooManyBytesInFlight Reason = "TooManyBytesInFlight"
	// ReasonInlineTooLarge closes a stream without route sets whose scope's snapshot is larger
	// than the server makes an inline layout of (Config.MaxInlineBytes).
	ReasonInlineTooLarge Reason = "InlineTooLarge"
	// ReasonSendTimeout closes a stream whose send the proxy did not take within the ACK deadline.
	ReasonSendTimeout Reason = "SendTimeout"
	ReasonAckTimeout  Reason = "AckTimeout"
	ReasonShutdown    Reason = "Shutdown"
)

var reasonCodes = map[Reason]codes.Code{
	ReasonNoPeerIdentity:               codes.PermissionDenied,
	ReasonMethodNotAllowed:             codes.PermissionDenied,
	ReasonNoSubscribe:                  codes.InvalidArgument,
	ReasonSubscribeTimeout:             codes.DeadlineExceeded,
	ReasonWireVersion:                  codes.FailedPrecondition,
	ReasonInvalidSubscribe:             codes.InvalidArgument,
	ReasonScopeNotAuthorized:           codes.PermissionDenied,
	ReasonScopeUnknown:                 codes.Unavailable,
	ReasonProtocolViolation:            codes.InvalidArgument,
	ReasonRevoked:                      codes.PermissionDenied,
	ReasonCertificateExpired:           codes.Unauthenticated,
	ReasonCertificateUntrusted:         codes.Unauthenticated,
	ReasonSuperseded:                   codes.Aborted,
	ReasonTooManyStreams:               codes.ResourceExhausted,
	ReasonTooManyConnections:           codes.ResourceExhausted,
	ReasonTooManyConnectionsFromSource: codes.ResourceExhausted,
	ReasonSendTimeout:                  codes.DeadlineExceeded,
	ReasonTooManyBytesInFlight:         codes.ResourceExhausted,
	ReasonInlineTooLarge:               codes.ResourceExhausted,
	ReasonAckTimeout:                   codes.DeadlineExceeded,
	ReasonShutdown:                     codes.Unavailable,
}

// Code returns the gRPC code a stream closed for r ends with.
func (r Reason) Code() codes.Code {
	if c, ok := reasonCodes[r]; ok {
		return c
	}
	return codes.Internal
}

// publicMessages replace the detail of a denial in what the proxy is told, for reasons whose
// detail would reveal something about other scopes (for example whether a Gateway of another
// namespace has a dedicated proxy). The detail stays in the server log.
var publicMessages = map[Reason]string{
	ReasonScopeNotAuthorized: "this identity may not subscribe to this scope",
	ReasonRevoked:            "this identity may no longer subscribe to this scope",
}

// denial is a refused or closed stream on its way to the RPC edge.
type denial struct {
	reason Reason
	msg    string
}

func (d *denial) Error() string { return fmt.Sprintf("%s: %s", d.reason, d.msg) }

// public is what the proxy is told.
func (d *denial) public() string {
	if m, ok := publicMessages[d.reason]; ok {
		return fmt.Sprintf("%s: %s", d.reason, m)
	}
	return d.Error()
}

func deny(reason Reason, format string, args ...any) error {
	return &denial{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// toStatus converts a session's end into what the handler returns: nil for a client that hung
// up, the status of a denial (with its public message), or the status of a transport error.
func toStatus(err error) (Reason, error) {
	var d *denial
	switch {
	case err == nil, errors.Is(err, io.EOF):
		return "", nil
	case errors.As(err, &d):
		return d.reason, status.Error(d.reason.Code(), d.public())
	case errors.Is(err, context.Canceled):
		return "", status.Error(codes.Canceled, err.Error())
	default:
		return "", status.Convert(err).Err()
	}
}
