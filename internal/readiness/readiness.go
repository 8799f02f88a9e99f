package readiness

import (
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReasonPending is the reason of a component condition nobody has reported yet.
const ReasonPending = "Pending"

// Board holds one condition per component type. Components call Report; readers call
// Conditions and wait on Changed.
type Board struct {
	mu      sync.Mutex
	conds   map[string]metav1.Condition
	order   []string
	changed chan struct{}
}

// NewBoard returns a board whose conditions of the given types start Unknown with reason
// Pending.
func NewBoard(types ...string) *Board {
	b := &Board{conds: map[string]metav1.Condition{}, order: slices.Clone(types), changed: make(chan struct{}, 1)}
	for _, t := range types {
		b.conds[t] = metav1.Condition{
			Type: t, Status: metav1.ConditionUnknown, Reason: ReasonPending,
			Message: "The component has not reported yet",
		}
	}
	return b
}

// Report records the state of one component. It returns whether anything changed.
func (b *Board) Report(condType string, status metav1.ConditionStatus, reason, message string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	next := metav1.Condition{Type: condType, Status: status, Reason: reason, Message: message}
	if prev, ok := b.conds[condType]; ok && prev == next {
		return false
	}
	if _, ok := b.conds[condType]; !ok {
		b.order = append(b.order, condType)
	}
	b.conds[condType] = next
	select {
	case b.changed <- struct{}{}:
	default:
	}
	return true
}

// Conditions returns the conditions in the order their types were registered.
func (b *Board) Conditions() []metav1.Condition {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]metav1.Condition, 0, len(b.order))
	for _, t := range b.order {
		out = append(out, b.conds[t])
	}
	return out
}

// AllTrue reports whether every condition is True, and the first one that is not.
func (b *Board) AllTrue() (bool, metav1.Condition) {
	for _, c := range b.Conditions() {
		if c.Status != metav1.ConditionTrue {
			return false, c
		}
	}
	return true, metav1.Condition{}
}

// Changed receives a value after changes; notifications coalesce.
func (b *Board) Changed() <-chan struct{} {
	return b.changed
}
