package health

import (
	"fmt"
	"net/http"
	"time"
)

// State is the readiness of the proxy's control channel.
type State int

const (
	// NotReady means no snapshot was applied yet, so the proxy has nothing to route with.
	NotReady State = iota
	// Degraded means a snapshot was applied and keeps serving, but the proxy is not in sync with the
	// controller (disconnected, or the latest snapshot was refused).
	Degraded
	// Ready means streaming, with the controller's latest snapshot applied.
	Ready
)

// States lists every state, in order.
var States = []State{NotReady, Degraded, Ready}

// String returns the state's name as /readyz shows it.
func (s State) String() string {
	switch s {
	case NotReady:
		return "NotReady"
	case Degraded:
		return "Degraded"
	case Ready:
		return "Ready"
	default:
		return fmt.Sprintf("State(%d)", int(s))
	}
}

// HTTPStatus is the /readyz status code of s: only NotReady fails the probe, so a proxy keeps
// receiving traffic from its last good snapshot through a control-plane outage.
func (s State) HTTPStatus() int {
	if s == NotReady {
		return http.StatusServiceUnavailable
	}
	return http.StatusOK
}

// Status is a point-in-time view of the control channel.
type Status struct {
	State State
	// Reason says why the proxy is in State.
	Reason string
	// Version is the version of the applied snapshot, empty before the first.
	Version string
	// AppliedAgo is how long ago Version was applied.
	AppliedAgo time.Duration
	// Draining says the proxy is shutting down: it fails readiness whatever State says, so
	// that endpoints stop sending it new connections while it still serves them.
	Draining bool
}

// HTTPStatus is the /readyz status code of s: 503 while draining, else its State's.
func (s Status) HTTPStatus() int {
	if s.Draining {
		return http.StatusServiceUnavailable
	}
	return s.State.HTTPStatus()
}

// String renders the status as /readyz answers it, for example
// "Degraded: stream closed: ... (serving snapshot 3fa2... applied 12s ago)", prefixed with
// "Draining: shutting down; " once the proxy drains.
func (s Status) String() string {
	out := s.State.String() + ": " + s.Reason
	if s.Draining {
		out = "Draining: shutting down; " + out
	}
	if s.Version != "" {
		out += fmt.Sprintf(" (serving snapshot %s applied %s ago)", s.Version, s.AppliedAgo.Truncate(time.Second))
	}
	return out
}
