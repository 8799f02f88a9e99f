package rebuild

import (
	"sync"
	"testing"
	"time"

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
// returns and reports when the earliest change of the batch was recorded, and that Restore hands
// a failed rebuild's changes, and their earlier time, to the next Take.
func TestChangesTakeAndRestore(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	c := Changes{Now: func() time.Time { return now }}
	if got, since := c.Take(); len(got) != 0 || !since.IsZero() {
		t.Fatalf("the zero Changes took %v at %v, want nothing", got, since)
	}
	var wg sync.WaitGroup
	c.Add("HTTPRoute")
	now = now.Add(time.Second)
	for range 9 {
		wg.Go(func() {
			c.Add("HTTPRoute")
			c.Add("Service")
		})
	}
	c.Add("Service")
	wg.Wait()
	first, firstSince := c.Take()
	if diff := cmp.Diff(Trigger{"HTTPRoute": 10, "Service": 10}, first); diff != "" {
		t.Fatalf("first take (-want +got):\n%s", diff)
	}
	if want := time.Unix(1000, 0); !firstSince.Equal(want) {
		t.Errorf("first take since %v, want the earliest change's %v", firstSince, want)
	}
	if got, since := c.Take(); len(got) != 0 || !since.IsZero() {
		t.Fatalf("a second take returned %v at %v, want nothing", got, since)
	}
	c.Add("Service")
	c.Restore(first, firstSince)
	got, since := c.Take()
	if diff := cmp.Diff(Trigger{"HTTPRoute": 10, "Service": 11}, got); diff != "" {
		t.Fatalf("take after a restore (-want +got):\n%s", diff)
	}
	if !since.Equal(firstSince) {
		t.Errorf("take after a restore since %v, want the restored %v", since, firstSince)
	}
	c.Restore(Trigger{"Service": 1}, firstSince)
	if _, since := c.Take(); !since.Equal(firstSince) {
		t.Errorf("a restore into no pending changes keeps its own time: got %v, want %v", since, firstSince)
	}
}
