package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

// maxNackDetail bounds the detail of a NACK.
const maxNackDetail = 1024

// StreamConfig says where and what to subscribe.
type StreamConfig struct {
	// Address is the stream listener, host:port.
	Address string
	// TLS is the mTLS client config, usually StreamTLS.
	TLS    *tls.Config
	NodeID string
	Scope  *discoveryv1.Scope
	// RouteSets asks for the routes of virtual hosts in RouteSet resources (Subscribe.route_sets),
	// which the subscriber assembles into their listeners (routeset.Assemble); without it the
	// routes come inside their listeners.
	RouteSets bool
	// DialOptions are added to the connection's options (tests, custom dialers).
	DialOptions []grpc.DialOption
}

// StreamTLS is the mTLS config of a stream: it presents the current certificate of certs and
// accepts only a server that chains to the current bundle and is serverID.
func StreamTLS(certs tlsconfig.CertificateSource, bundles tlsconfig.BundleSource, serverID spiffeid.ID) *tls.Config {
	return tlsconfig.MTLSClient(certs, bundles, serverID.TrustDomain(), tlsconfig.AuthorizeID(serverID))
}

// ReceiveWindowBytes is the fixed HTTP/2 receive window of a stream's connection and of the
// stream.
const ReceiveWindowBytes = 1 << 20

// Stream is one subscription. Recv, Ack and Nack must be called from one goroutine.
type Stream struct {
	conn   *grpc.ClientConn
	stream discoveryv1.Discovery_StreamClient
	cancel context.CancelFunc
}

// Subscribe connects and sends the Subscribe message. The stream lives until ctx ends, the
// server closes it or Close is called.
func Subscribe(ctx context.Context, cfg StreamConfig) (*Stream, error) {
	if cfg.Address == "" || cfg.TLS == nil || cfg.NodeID == "" || cfg.Scope == nil {
		return nil, errors.New("subscribe: address, TLS config, node ID and scope are required")
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(cfg.TLS)),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(discoveryv1.MaxServerMessageBytes),
			grpc.MaxCallSendMsgSize(discoveryv1.MaxClientMessageBytes),
		),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: discoveryv1.KeepaliveInterval, Timeout: discoveryv1.KeepaliveTimeout,
		}),
		// Fixed receive windows: with grpc-go's default, the window is estimated from
		// bandwidth-delay pings, one sent on every snapshot received, which the server answers
		// with a write of its own; with thousands of proxies per controller that ping doubled the
		// server's writes per delta and cost a fifth of its CPU per stream
		// (TestBenchFanoutPerStream: 58 us against 45 us). A window of 1 MiB takes a delta in
		// one flight and a full snapshot in a few round trips of the cluster network.
		grpc.WithStaticStreamWindowSize(ReceiveWindowBytes),
		grpc.WithStaticConnWindowSize(ReceiveWindowBytes),
	}, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Address, opts...)
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", cfg.Address, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Stream{conn: conn, cancel: cancel}
	if err := s.open(ctx, cfg); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("subscribe to %s: %w", cfg.Address, err)
	}
	return s, nil
}

func (s *Stream) open(ctx context.Context, cfg StreamConfig) error {
	stream, err := discoveryv1.NewDiscoveryClient(s.conn).Stream(ctx)
	if err != nil {
		return err
	}
	s.stream = stream
	err = stream.Send(&discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Subscribe{
		Subscribe: &discoveryv1.Subscribe{WireVersion: discoveryv1.WireVersion, NodeId: cfg.NodeID, Scope: cfg.Scope, RouteSets: cfg.RouteSets},
	}})
	if errors.Is(err, io.EOF) {
		// The server ended the stream before the subscription went out (a refusal it sends at
		// once, such as a wire version it does not speak): its status says why, and Recv
		// returns it.
		if _, rerr := stream.Recv(); rerr != nil {
			return rerr
		}
	}
	return err
}

// Recv waits for the next snapshot. Its error carries the server's gRPC status.
func (s *Stream) Recv() (*discoveryv1.Snapshot, error) {
	msg, err := s.stream.Recv()
	if err != nil {
		return nil, err
	}
	snap := msg.GetSnapshot()
	if snap == nil {
		return nil, errors.New("recv: server message without a snapshot")
	}
	return snap, nil
}

// Ack tells the server that snap was applied.
func (s *Stream) Ack(snap *discoveryv1.Snapshot) error {
	return s.stream.Send(&discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Ack{
		Ack: &discoveryv1.Ack{Version: snap.GetVersion(), Nonce: snap.GetNonce()},
	}})
}

// Nack tells the server that snap was refused, with a reason for its logs.
func (s *Stream) Nack(snap *discoveryv1.Snapshot, reason error) error {
	return s.stream.Send(&discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Nack{
		Nack: &discoveryv1.Nack{Version: snap.GetVersion(), Nonce: snap.GetNonce(), Detail: nackDetail(reason)},
	}})
}

// Close ends the stream and its connection.
func (s *Stream) Close() error {
	s.cancel()
	return s.conn.Close()
}

// ApplyFunc stages and applies one snapshot; an error refuses it (NACK) and the proxy keeps
// what it had.
type ApplyFunc func(ctx context.Context, snap *discoveryv1.Snapshot) error

// Run subscribes and answers every snapshot with an ACK when apply succeeds and a NACK when it
// fails, until ctx ends or the stream breaks. It returns the stream's error, whose gRPC status
// tells the supervisor what to do (see IsPermanent), or ctx's error.
func Run(ctx context.Context, cfg StreamConfig, apply ApplyFunc) error {
	s, err := Subscribe(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }()
	for {
		snap, err := s.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("stream from %s: %w", cfg.Address, err)
		}
		if err := answer(ctx, s, snap, apply); err != nil {
			if errors.Is(err, io.EOF) {
				// The server ended the stream while the answer was sent: its status, which the
				// supervisor acts on, comes with the next receive.
				if _, rerr := s.Recv(); rerr != nil {
					err = rerr
				}
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("stream from %s: %w", cfg.Address, err)
		}
	}
}

func answer(ctx context.Context, s *Stream, snap *discoveryv1.Snapshot, apply ApplyFunc) error {
	if err := apply(ctx, snap); err != nil {
		return s.Nack(snap, err)
	}
	return s.Ack(snap)
}

// nackDetail is err's text as valid UTF-8 (protobuf strings must be) of at most maxNackDetail
// bytes, cut at a character boundary.
func nackDetail(err error) string {
	detail := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(detail) <= maxNackDetail {
		return detail
	}
	cut := maxNackDetail
	for cut > 0 && !utf8.RuneStart(detail[cut]) {
		cut--
	}
	return detail[:cut]
}
