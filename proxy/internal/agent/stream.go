package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

// errRotated ends a stream so that the next one connects with a fresh SVID.
var errRotated = errors.New("SVID rotated")

// stream connects with s, subscribes and serves snapshots until the stream fails, ctx ends or
// the SVID rotates (errRotated). healthy reports whether at least one snapshot arrived.
func (a *Agent) stream(ctx context.Context, s *svid) (healthy bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	conn, err := grpc.NewClient("passthrough:///"+a.cfg.StreamAddress, a.streamDialOptions(s)...)
	if err != nil {
		return false, fmt.Errorf("dial stream %s: %w", a.cfg.StreamAddress, err)
	}
	defer func() { _ = conn.Close() }()
	go a.cancelOnRotation(ctx, cancel)

	st, err := discoveryv1.NewDiscoveryClient(conn).Stream(ctx)
	if err != nil {
		return false, streamError(ctx, fmt.Errorf("open stream at %s: %w", a.cfg.StreamAddress, err))
	}
	if err := st.Send(a.subscribe()); err != nil {
		return false, streamError(ctx, recvError(st, err))
	}
	a.cfg.Observer.StreamOpened()
	a.cfg.Logger.Info("Subscribed", "address", a.cfg.StreamAddress, "nodeID", a.cfg.NodeID,
		"scope", a.cfg.Scope.String(), "spiffeID", s.id.String())
	for {
		msg, err := st.Recv()
		if err != nil {
			return healthy, streamError(ctx, fmt.Errorf("receive: %w", err))
		}
		snap := msg.GetSnapshot()
		if snap == nil {
			a.cfg.Logger.V(1).Info("Ignored server message of an unknown kind")
			continue
		}
		healthy = true
		if err := st.Send(a.handle(ctx, snap)); err != nil {
			return healthy, streamError(ctx, recvError(st, err))
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

// recvError explains a failed Send: on io.EOF the stream ended, and Recv reports its status.
func recvError(st discoveryv1.Discovery_StreamClient, sendErr error) error {
	if !errors.Is(sendErr, io.EOF) {
		return fmt.Errorf("send: %w", sendErr)
	}
	for {
		if _, err := st.Recv(); err != nil {
			return fmt.Errorf("receive: %w", err)
		}
	}
}

func (a *Agent) subscribe() *discoveryv1.ClientMessage {
	return &discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Subscribe{Subscribe: &discoveryv1.Subscribe{
		WireVersion: a.cfg.WireVersion, NodeId: a.cfg.NodeID, Scope: a.cfg.Scope.proto(),
	}}}
}

// streamDialOptions present s over mTLS and accept only the controller: a certificate of the
// SVID's trust domain, verified against the bundle that came with s, carrying ServerName as a
// DNS name and, when configured, ControllerID as its SPIFFE ID.
func (a *Agent) streamDialOptions(s *svid) []grpc.DialOption {
	authorize := tlsconfig.AuthorizeAny()
	if !a.cfg.ControllerID.IsZero() {
		authorize = tlsconfig.AuthorizeID(a.cfg.ControllerID)
	}
	cfg := tlsconfig.MTLSClient(tlsconfig.NewRotatingCertificate(s.certificate),
		tlsconfig.NewRotatingBundle(s.bundle), s.id.TrustDomain(), authorize)
	cfg.VerifyConnection = requireServerName(cfg.VerifyConnection, a.cfg.ServerName)
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(discoveryv1.MaxServerMessageBytes),
			grpc.MaxCallSendMsgSize(discoveryv1.MaxClientMessageBytes),
		),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: discoveryv1.KeepaliveInterval, Timeout: discoveryv1.KeepaliveTimeout,
		}),
	}
	return append(base, a.cfg.DialOptions...)
}

// requireServerName runs verify, then requires the verified leaf to carry name: proxy SVIDs
// have no DNS names, so no proxy can pose as the controller.
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
