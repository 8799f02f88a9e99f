package agent_test

import (
	"testing"
	"time"

	"coxswain.dev/coxswain/proxy/internal/agent"
)

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	b := agent.DefaultBackoff
	ms := time.Millisecond
	tests := []struct {
		name     string
		attempt  int
		r        float64
		min, max time.Duration
	}{
		{"the first retry waits the base without jitter", 0, 0, 250 * ms, 250 * ms},
		{"the first retry waits at most base plus 20%", 0, 0.999, 250 * ms, 300 * ms},
		{"the second retry doubles", 1, 0, 500 * ms, 500 * ms},
		{"the fifth retry waits 4 s to 4.8 s", 4, 0.5, 4 * time.Second, 4800 * ms},
		{"the eighth retry reaches the cap", 7, 0, 30 * time.Second, 30 * time.Second},
		{"jitter never lifts a delay over the cap", 7, 0.999, 30 * time.Second, 30 * time.Second},
		{"a long outage stays at the cap", 1000, 0.5, 30 * time.Second, 30 * time.Second},
		{"a negative attempt waits the base", -1, 0, 250 * ms, 250 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := b.Delay(tt.attempt, tt.r)
			if got < tt.min || got > tt.max {
				t.Fatalf("Delay(%d, %v) = %s, want within [%s, %s]", tt.attempt, tt.r, got, tt.min, tt.max)
			}
		})
	}
}

func TestBackoffDelayStaysWithinBounds(t *testing.T) {
	t.Parallel()
	b := agent.DefaultBackoff
	prevCeiling := time.Duration(0)
	for attempt := range 40 {
		for _, r := range []float64{0, 0.25, 0.5, 0.75, 0.9999} {
			d := b.Delay(attempt, r)
			if d < b.Base || d > b.Max {
				t.Fatalf("Delay(%d, %v) = %s, outside [%s, %s]", attempt, r, d, b.Base, b.Max)
			}
		}
		ceiling := b.Delay(attempt, 0)
		if ceiling < prevCeiling {
			t.Fatalf("Delay(%d, 0) = %s shrank from %s", attempt, ceiling, prevCeiling)
		}
		prevCeiling = ceiling
	}
}
