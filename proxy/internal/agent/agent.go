package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// ErrWireVersion reports that the controller refused this proxy's wire version. Retrying cannot
// help: one of the two must be rolled to the other's release.
var ErrWireVersion = errors.New("wire version mismatch")

// Agent bootstraps the proxy's identity and keeps its snapshot stream. Build it with New and
// call Run once.
type Agent struct {
	cfg Config

	// current is the SVID streams connect with; rotated signals a new one (capacity 1).
	current atomic.Pointer[svid]
	rotated chan struct{}
	// reboot asks the renewal loop for a bootstrap now (capacity 1); lastReboot is when it last
	// did, in Unix nanoseconds, for the rate limit.
	reboot     chan struct{}
	lastReboot atomic.Int64
	// bundleFallback is set while the mounted trust bundle file is unusable and the last
	// bootstrap's bundle stands in for it, so that the change is logged once each way.
	bundleFallback atomic.Bool

	// applied is the set applied last, which deltas merge over, and hashed its content hash,
	// whose digests the next set's hash reuses for the resources it shares. Only the stream
	// loop uses them.
	applied *resource.Set
	hashed  *cache.Snapshot
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Agent, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Agent{cfg: cfg, rotated: make(chan struct{}, 1), reboot: make(chan struct{}, 1)}, nil
}

// Run keeps the proxy's identity fresh and its stream open until ctx ends, and returns nil then.
// It returns an error wrapping ErrWireVersion when the controller speaks another wire version;
// the applied state keeps serving either way.
func (a *Agent) Run(ctx context.Context) error {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	a.restore(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := a.renewLoop(ctx); err != nil {
			stop(err)
		}
	})
	if err := a.streamLoop(ctx); err != nil {
		stop(err)
	}
	wg.Wait()
	err := context.Cause(ctx)
	if !errors.Is(err, ErrWireVersion) {
		return nil
	}
	a.cfg.Logger.Error(err, "Stopped retrying the control channel: roll the proxy and the controller to the same release")
	a.cfg.Observer.Stopped(err)
	return err
}

// renewLoop bootstraps an SVID, publishes it and sleeps until its renewal time, retrying
// failures with backoff, until ctx ends or the controller refuses the wire version.
func (a *Agent) renewLoop(ctx context.Context) error {
	retry := &retrier{policy: a.cfg.Backoff, rand: a.cfg.Rand}
	for {
		next, err := a.bootstrap(ctx)
		if stopped(ctx) {
			return nil
		}
		var wait time.Duration
		switch {
		case err != nil:
			if err := permanent(err); err != nil {
				return err
			}
			wait = retry.next()
			a.cfg.Logger.Info("Bootstrap failed", "error", err.Error(), "retryIn", wait.String())
			a.cfg.Observer.BootstrapFailed(err)
		default:
			retry.reset()
			a.publish(next)
			wait = next.renewAt.Sub(a.cfg.Clock.Now())
		}
		if !a.sleep(ctx, wait, a.reboot) {
			return nil
		}
	}
}

// certificateRefused reports whether the stream failed because the controller refused this
// proxy's certificate in the TLS handshake. With TLS 1.3 the client learns it only from the
// alert on its first read, which gRPC reports as text in an UNAVAILABLE status.
func certificateRefused(err error) bool {
	var alert tls.AlertError
	if errors.As(err, &alert) {
		return true
	}
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "remote error: tls: ")
}

// controllerUnverified asks for a bootstrap now, at most once per ReBootstrapInterval, after
// the controller's stream certificate failed verification or the controller refused ours: after
// an immediate CA switch the SVID and bundle in hand are useless, and only a bootstrap against
// the bundle file the kubelet keeps current recovers before the scheduled renewal.
func (a *Agent) controllerUnverified(err error) {
	now := a.cfg.Clock.Now()
	last := a.lastReboot.Load()
	if last != 0 && now.Sub(time.Unix(0, last)) < a.cfg.ReBootstrapInterval {
		return
	}
	if !a.lastReboot.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	a.cfg.Logger.Info("Controller certificate did not verify, bootstrapping again", "error", err.Error())
	select {
	case a.reboot <- struct{}{}:
	default:
	}
}

// publish makes s the SVID of the next stream and tells the stream loop.
func (a *Agent) publish(s *svid) {
	a.current.Store(s)
	a.cfg.Logger.Info("Obtained SVID", "spiffeID", s.id.String(), "notAfter", s.notAfter,
		"renewAt", s.renewAt)
	a.cfg.Observer.SVIDIssued(s.notAfter)
	select {
	case a.rotated <- struct{}{}:
	default:
	}
}

// streamLoop keeps one stream open with the current SVID, reconnecting after a backoff when it
// fails and at once when the SVID rotates.
func (a *Agent) streamLoop(ctx context.Context) error {
	retry := &retrier{policy: a.cfg.Backoff, rand: a.cfg.Rand}
	if !a.awaitSVID(ctx) {
		return nil
	}
	for {
		healthy, err := a.stream(ctx, a.current.Load())
		if stopped(ctx) {
			return nil
		}
		if errors.Is(err, errRotated) {
			continue
		}
		a.cfg.Observer.StreamClosed(err)
		if err := permanent(err); err != nil {
			return err
		}
		if certificateRefused(err) {
			a.controllerUnverified(err)
		}
		if healthy {
			retry.reset()
		}
		wait := retry.next()
		a.cfg.Logger.Info("Stream closed", "error", err.Error(), "retryIn", wait.String())
		if !a.sleep(ctx, wait, a.rotated) {
			return nil
		}
	}
}

// awaitSVID waits for the first SVID and reports false when ctx ends first.
func (a *Agent) awaitSVID(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-a.rotated:
		return true
	}
}

// sleep waits d, or less when wake fires, and reports false when ctx ends first.
func (a *Agent) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := a.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
	case <-wake:
	}
	return true
}

// stopped reports whether ctx ended, which makes any error of the attempt moot.
func stopped(ctx context.Context) bool { return ctx.Err() != nil }

// permanent returns an error wrapping ErrWireVersion when err is the controller's
// FAILED_PRECONDITION, which it answers only to a wire-version mismatch; nil otherwise.
func permanent(err error) error {
	if status.Code(err) == codes.FailedPrecondition {
		return fmt.Errorf("%w: %w", ErrWireVersion, err)
	}
	return nil
}
