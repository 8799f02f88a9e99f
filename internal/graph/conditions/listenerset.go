package conditions

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const (
	setAccepted   = string(gwapiv1.ListenerSetConditionAccepted)
	setProgrammed = string(gwapiv1.ListenerSetConditionProgrammed)
)

// ReasonParentNotProgrammed is used with a ListenerSet's Programmed condition when its parent
// Gateway is not accepted, so nothing of it is programmed; the spec names the reason but
// defines no constant for it.
const ReasonParentNotProgrammed = "ParentNotProgrammed"

// NewListenerSetAccepted says the ListenerSet is attached to its Gateway with every listener.
func NewListenerSetAccepted() metav1.Condition {
	return truth(setAccepted, string(gwapiv1.ListenerSetReasonAccepted), "ListenerSet is accepted")
}

// NewListenerSetAcceptedListenersNotValid says the ListenerSet is attached, but some of its
// listeners are not valid.
func NewListenerSetAcceptedListenersNotValid(msg string) metav1.Condition {
	return truth(setAccepted, string(gwapiv1.ListenerSetReasonListenersNotValid), msg)
}

// NewListenerSetNotAccepted says the ListenerSet is not attached to its Gateway, for reason
// NotAllowed, ParentNotAccepted or ListenersNotValid; the Programmed condition that goes with
// it is NewListenerSetNotProgrammed.
func NewListenerSetNotAccepted(reason gwapiv1.ListenerSetConditionReason, msg string) metav1.Condition {
	return falsity(setAccepted, string(reason), msg)
}

// NewListenerSetProgrammed says the ListenerSet's valid listeners are compiled for the proxies
// of its Gateway.
func NewListenerSetProgrammed() metav1.Condition {
	return truth(setProgrammed, string(gwapiv1.ListenerSetReasonProgrammed), "ListenerSet is programmed")
}

// NewListenerSetNotProgrammed says nothing of the ListenerSet is programmed.
func NewListenerSetNotProgrammed(reason, msg string) metav1.Condition {
	return falsity(setProgrammed, reason, msg)
}

// NewListenerConflictNotProgrammed is the Programmed condition of a ListenerSet listener that
// loses a conflict: it carries the conflict's reason, as ListenerSet listeners report it.
func NewListenerConflictNotProgrammed(reason, msg string) metav1.Condition {
	return falsity(listenerProgrammed, reason, msg)
}

// NewListenerLimitReached refuses a ListenerSet listener beyond the cap of its Gateway port: it
// is neither accepted nor programmed.
func NewListenerLimitReached(msg string) []metav1.Condition {
	return []metav1.Condition{
		falsity(listenerAccepted, ReasonListenerLimitReached, msg),
		falsity(listenerProgrammed, ReasonListenerLimitReached, msg),
	}
}
