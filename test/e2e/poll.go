package e2e

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrTimeout reports that a condition did not hold before its deadline.
var ErrTimeout = errors.New("timed out")

// Poll calls cond every interval until it returns nil, and returns nil then. When timeout
// passes first it returns ErrTimeout with cond's last error, which should say what it saw.
func Poll(ctx context.Context, timeout, interval time.Duration, cond func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last error
	for {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		// An attempt the deadline cut short says less than the one before it.
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w after %s: %w", ErrTimeout, timeout, last)
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
