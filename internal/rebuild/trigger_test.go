package rebuild

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTriggerLabel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		trigger Trigger
		want    string
	}{
		{"a rebuild without recorded changes is None", Trigger{}, TriggerNone},
		{"changes of one kind are labelled by it", Trigger{"HTTPRoute": 3}, "HTTPRoute"},
		{"a new leader's rebuild is Elected", Trigger{TriggerElected: 1}, TriggerElected},
		{"changes of several kinds coalesced are Multiple", Trigger{"Service": 1, "EndpointSlice": 2}, TriggerMultiple},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.trigger.Label(); got != tt.want {
				t.Errorf("Label() = %q, want %q", got, tt.want)
			}
		})
	}
}

// Tests that changes recorded concurrently are all counted once, that Take forgets what it
// returns, and that Restore hands a failed rebuild's changes to the next Take.
func TestChangesTakeAndRestore(t *testing.T) {
	t.Parallel()
	var c Changes
	if got := c.Take(); len(got) != 0 {
		t.Fatalf("the zero Changes took %v, want nothing", got)
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			c.Add("HTTPRoute")
			c.Add("Service")
		})
	}
	wg.Wait()
	first := c.Take()
	if diff := cmp.Diff(Trigger{"HTTPRoute": 10, "Service": 10}, first); diff != "" {
		t.Fatalf("first take (-want +got):\n%s", diff)
	}
	if got := c.Take(); len(got) != 0 {
		t.Fatalf("a second take returned %v, want nothing", got)
	}
	c.Add("Service")
	c.Restore(first)
	if diff := cmp.Diff(Trigger{"HTTPRoute": 10, "Service": 11}, c.Take()); diff != "" {
		t.Fatalf("take after a restore (-want +got):\n%s", diff)
	}
}
