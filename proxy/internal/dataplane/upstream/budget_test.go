package upstream

import (
	"testing"
	"time"
)

// Tests the retry budget's rate: five requests earn one retry, the floor's bucket holds its
// window of retries (a second here) and refills at its rate, a failed connection spends no
// rate, and the retries in flight stay within the concurrency bound.
func TestRetryBudgetRate(t *testing.T) {
	t.Parallel()
	b := RetryBudget{floorEvery: time.Second / 3, floorWindow: time.Second}
	for range 5 {
		b.Begin()
	}
	granted := 0
	for range 3 {
		if b.Acquire(false) {
			granted++
		}
	}
	if granted != 3 {
		t.Fatalf("%d of 3 retries granted with 5 requests in flight, want 3 (one earned, two of the floor's three)", granted)
	}
	if b.Acquire(false) {
		t.Error("a fourth retry in flight was granted beyond the concurrency floor of 3")
	}
	for range 3 {
		b.Release()
	}
	if !b.Acquire(false) {
		t.Error("the floor's third retry of the second was refused")
	}
	b.Release()
	if b.Acquire(false) {
		t.Error("a retry was granted with nothing earned and the floor's bucket spent")
	}
	if !b.Acquire(true) {
		t.Error("a retry after a failed connection was refused")
	}
	b.Release()
	if !b.spendFloor(time.Now().Add(time.Second)) {
		t.Error("the floor did not refill after a second")
	}
}

// Tests the default floor: a quiet cluster's bucket holds RetryBudgetFloorWindow of
// DefaultRetryBudgetMinPerSecond retries, taken one after another, then refills at that rate.
func TestRetryBudgetDefaultFloor(t *testing.T) {
	t.Parallel()
	var b RetryBudget
	burst := int(RetryBudgetFloorWindow / time.Second * DefaultRetryBudgetMinPerSecond)
	for i := range burst {
		if !b.Acquire(false) {
			t.Fatalf("retry %d of the floor's burst of %d was refused", i+1, burst)
		}
		b.Release()
	}
	if b.Acquire(false) {
		t.Fatalf("a retry beyond the floor's burst of %d was granted", burst)
	}
	if !b.spendFloor(time.Now().Add(time.Second / DefaultRetryBudgetMinPerSecond)) {
		t.Error("the floor did not refill one retry after a tenth of a second")
	}
}
