package castore

import (
	"errors"

	"coxswain.dev/coxswain/api/v1alpha1"
)

// Errors Current wraps when there is no usable CA.
var (
	// ErrNotLoaded: the store has not read the CA Secret yet.
	ErrNotLoaded = errors.New("castore: CA not loaded yet")
	// ErrCASecretNotFound: External mode and the CA Secret does not exist.
	ErrCASecretNotFound = errors.New("castore: CA Secret not found")
	// ErrCASecretInvalid: the CA Secret exists but holds no usable CA.
	ErrCASecretInvalid = errors.New("castore: CA Secret invalid")
	// ErrCAWrite: Auto mode could not write the CA Secret.
	ErrCAWrite = errors.New("castore: CA Secret not writable")
	// ErrCADistrusted: the CA Secret's signing CA is one of discovery.ca.distrustedRoots.
	ErrCADistrusted = errors.New("castore: CA distrusted")
)

// Reasons of the CAReady condition and of the events about the CA Secret.
const (
	ReasonCALoaded          = "CALoaded"
	ReasonCARotated         = "CARotated"
	ReasonCASecretNotFound  = "CASecretNotFound"
	ReasonCASecretInvalid   = "CASecretInvalid"
	ReasonCASecretWriteFail = "CASecretWriteFailed"
	ReasonCANotLoaded       = "CANotLoaded"
	ReasonCADistrusted      = "CADistrusted"
)

// conditionType is the readiness condition the store reports.
const conditionType = v1alpha1.ConditionCAReady

// reasonOf maps a load error to its condition reason.
func reasonOf(err error) string {
	switch {
	case errors.Is(err, ErrCASecretNotFound):
		return ReasonCASecretNotFound
	case errors.Is(err, ErrCASecretInvalid):
		return ReasonCASecretInvalid
	case errors.Is(err, ErrCAWrite):
		return ReasonCASecretWriteFail
	case errors.Is(err, ErrCADistrusted):
		return ReasonCADistrusted
	default:
		return ReasonCANotLoaded
	}
}
