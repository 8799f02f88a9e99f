package conditions

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReasonInvalidGatewayClass is used with a Gateway's Accepted condition when its GatewayClass
// is not accepted; the spec lists no reason for that case.
const ReasonInvalidGatewayClass = "InvalidGatewayClass"

// ReasonProxyNameConflict is used with a Gateway's Accepted condition when the name of its
// dedicated proxy is reserved or taken by another Gateway's proxy.
const ReasonProxyNameConflict = "ProxyNameConflict"

// ReasonNamespaceLimitReached is used with a shared pool Gateway's Accepted condition when its
// namespace already has as many shared pool Gateways as allowed, all older.
const ReasonNamespaceLimitReached = "NamespaceLimitReached"

// ReasonPortsExhausted is used with a listener's Programmed condition when its port got no
// internal port of the shared pool: the range is taken, or its Gateway's namespace holds as many
// as allowed.
const ReasonPortsExhausted = "PortsExhausted"

// ReasonListenerLimitReached is used with a ListenerSet listener's Accepted and Programmed
// conditions when its Gateway's port already has as many accepted listeners as allowed, all
// taking precedence.
const ReasonListenerLimitReached = "ListenerLimitReached"

// ReasonListenerSetLimitReached is used with a ListenerSet's Accepted and Programmed conditions
// when its Gateway, or its own namespace, already has as many ListenerSets attached as allowed,
// all older.
const ReasonListenerSetLimitReached = "ListenerSetLimitReached"

// ReasonSnapshotSizeLimitReached is used with a route parent's Accepted condition when the
// route would take its namespace's share of the encoded snapshot of the scope (the shared pool,
// or a dedicated Gateway's proxy) that serves the parent past its limit, or the scope's routes
// past what one snapshot message may carry: older routes come first.
const ReasonSnapshotSizeLimitReached = "SnapshotSizeLimitReached"

// ReasonProxyNotReady is used with a Gateway's Programmed condition while no replica of its
// proxy is ready.
const ReasonProxyNotReady = "ProxyNotReady"

func newCondition(condType string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: status, Reason: reason, Message: message}
}

func truth(condType, reason, message string) metav1.Condition {
	return newCondition(condType, metav1.ConditionTrue, reason, message)
}

func falsity(condType, reason, message string) metav1.Condition {
	return newCondition(condType, metav1.ConditionFalse, reason, message)
}

// Stamp sets ObservedGeneration on every condition and returns the slice.
func Stamp(conds []metav1.Condition, generation int64) []metav1.Condition {
	for i := range conds {
		conds[i].ObservedGeneration = generation
	}
	return conds
}

// Find returns the condition of the given type, or nil.
func Find(conds []metav1.Condition, condType string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == condType {
			return &conds[i]
		}
	}
	return nil
}

// Upsert replaces the condition of the same type, or appends it.
func Upsert(conds []metav1.Condition, c metav1.Condition) []metav1.Condition {
	if old := Find(conds, c.Type); old != nil {
		*old = c
		return conds
	}
	return append(conds, c)
}
