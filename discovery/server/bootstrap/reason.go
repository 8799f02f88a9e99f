package bootstrap

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
)

// Reason is the machine-readable cause of a rejection: the metric label and event reason detail.
type Reason string

// The reasons a bootstrap is rejected, each with one gRPC code (see Code).
const (
	ReasonWireVersion      Reason = "WireVersionMismatch"
	ReasonTokenMissing     Reason = "TokenMissing"
	ReasonTokenRejected    Reason = "TokenRejected"
	ReasonPodMismatch      Reason = "PodMismatch"
	ReasonReviewFailed     Reason = "TokenReviewUnavailable"
	ReasonNotAllowed       Reason = "IdentityNotAllowed"
	ReasonInvalidIdentity  Reason = "InvalidIdentity"
	ReasonInvalidCSR       Reason = "InvalidCSR"
	ReasonCAUnavailable    Reason = "CAUnavailable"
	ReasonSigningFailed    Reason = "SigningFailed"
	ReasonOverloaded       Reason = "Overloaded"
	ReasonQueueTimeout     Reason = "QueueTimeout"
	ReasonCanceled         Reason = "Canceled"
	ReasonMethodNotAllowed Reason = "MethodNotAllowed"
)

var reasonCodes = map[Reason]codes.Code{
	ReasonWireVersion:      codes.FailedPrecondition,
	ReasonTokenMissing:     codes.Unauthenticated,
	ReasonTokenRejected:    codes.Unauthenticated,
	ReasonPodMismatch:      codes.PermissionDenied,
	ReasonReviewFailed:     codes.Unavailable,
	ReasonNotAllowed:       codes.PermissionDenied,
	ReasonInvalidIdentity:  codes.PermissionDenied,
	ReasonInvalidCSR:       codes.InvalidArgument,
	ReasonCAUnavailable:    codes.Unavailable,
	ReasonSigningFailed:    codes.Internal,
	ReasonOverloaded:       codes.ResourceExhausted,
	ReasonQueueTimeout:     codes.Unavailable,
	ReasonCanceled:         codes.Canceled,
	ReasonMethodNotAllowed: codes.PermissionDenied,
}

// Code returns the gRPC status code a rejection for r carries.
func (r Reason) Code() codes.Code {
	if c, ok := reasonCodes[r]; ok {
		return c
	}
	return codes.Internal
}

// rejectError is a refused bootstrap on its way to the RPC edge.
type rejectError struct {
	reason Reason
	// public is what the client is told; err adds the detail for logs and events.
	public string
	err    error
}

func (e *rejectError) Error() string {
	if e.err == nil {
		return e.public
	}
	return fmt.Sprintf("%s: %v", e.public, e.err)
}

func (e *rejectError) Unwrap() error { return e.err }

func reject(reason Reason, public string, err error) error {
	return &rejectError{reason: reason, public: public, err: err}
}

// authenticationReason maps an Authenticator error to its reason.
func authenticationReason(err error) Reason {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ReasonCanceled
	case errors.Is(err, ErrPodMismatch):
		return ReasonPodMismatch
	case errors.Is(err, ErrUnavailable):
		return ReasonReviewFailed
	default:
		return ReasonTokenRejected
	}
}
