package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"

	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

// errRotated ends a stream so that the next one connects with a fresh SVID.
var errRotated = errors.New("SVID rotated")

// stream connects with s, subscribes and serves snapshots until the stream fails, ctx ends or
// the SVID rotates (errRotated). healthy reports whether at least one snapshot arrived.
func (a *Agent) stream(ctx context.Context, s *svid) (healthy bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go a.cancelOnRotation(ctx, cancel)
	st, err := client.Subscribe(ctx, client.StreamConfig{
		Address: a.cfg.StreamAddress, TLS: a.streamTLS(s), NodeID: a.cfg.NodeID,
		Scope: a.cfg.Scope.proto(), DialOptions: a.cfg.DialOptions, RouteSets: true,
	})
	if err != nil {
		return false, streamError(ctx, err)
	}
	defer func() { _ = st.Close() }()
	a.cfg.Observer.StreamOpened()
	a.cfg.Logger.Info("Subscribed", "address", a.cfg.StreamAddress, "nodeID", a.cfg.NodeID,
		"scope", a.cfg.Scope.String(), "spiffeID", s.id.String())
	for {
		snap, err := st.Recv()
		if err != nil {
			return healthy, streamError(ctx, fmt.Errorf("receive: %w", err))
		}
		healthy = true
		if err := a.handle(ctx, st, snap); err != nil {
			return healthy, streamError(ctx, fmt.Errorf("answer: %w", err))
		}
	}
}

// cancelOnRotation cancels the stream when a new SVID is published.
func (a *Agent) cancelOnRotation(ctx context.Context, cancel context.CancelCauseFunc) {
	select {
	case <-ctx.Done():
	case <-a.rotated:
		cancel(errRotated)
	}
}

// streamError prefers the cause of a cancelled stream context, such as errRotated.
func streamError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// streamTLS presents s over mTLS and accepts only the controller: a certificate verified
// against the trust bundle of the moment (see trustBundle), with the controller's SPIFFE ID and
// ServerName as a DNS name. Proxy SVIDs carry no DNS name, so no proxy can pose as the
// controller even when the controller's identity is misconfigured. A controller that fails
// verification forces a (rate-limited) bootstrap.
func (a *Agent) streamTLS(s *svid) *tls.Config {
	cfg := client.StreamTLS(tlsconfig.NewRotatingCertificate(s.certificate), a.trust(s.bundle), s.controller)
	verify := requireServerName(cfg.VerifyConnection, a.cfg.ServerName)
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		err := verify(cs)
		if err != nil {
			a.controllerUnverified(err)
		}
		return err
	}
	return cfg
}

// requireServerName runs verify, then requires the verified leaf to carry name.
func requireServerName(verify func(tls.ConnectionState) error, name string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if err := verify(cs); err != nil {
			return err
		}
		if err := cs.PeerCertificates[0].VerifyHostname(name); err != nil {
			return fmt.Errorf("verify stream server name: %w", err)
		}
		return nil
	}
}
