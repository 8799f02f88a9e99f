package e2e

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var (
	// ErrTimeout reports that a condition did not hold before its deadline.
	ErrTimeout = errors.New("timed out")
	// ErrGiveUp ends a Poll at once when a condition's error wraps it: waiting cannot help.
	ErrGiveUp = errors.New("gave up")
)

// Poll calls cond every interval until it returns nil, and returns nil then, or an error
// wrapping ErrGiveUp, and returns that at once. When timeout
// passes first it returns ErrTimeout with cond's last error, which should say what it saw.
// The attempts get ctx, not the deadline, so that none is cut short into a less telling error.
func Poll(ctx context.Context, timeout, interval time.Duration, cond func(context.Context) error) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := cond(ctx)
		if err == nil || errors.Is(err, ErrGiveUp) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		case <-deadline.C:
			return fmt.Errorf("%w after %s: %w", ErrTimeout, timeout, err)
		case <-tick.C:
		}
	}
}

// Hold calls cond every interval for d and returns its first error: the condition must hold
// throughout.
func Hold(ctx context.Context, d, interval time.Duration, cond func(context.Context) error) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := cond(ctx); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
