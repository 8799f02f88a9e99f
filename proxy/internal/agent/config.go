package agent

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/proxy/internal/clock"
)

// Defaults of Config.
const (
	DefaultBootstrapTimeout = 30 * time.Second
	// DefaultRenewFraction of an SVID's remaining lifetime passes before it is renewed.
	DefaultRenewFraction = 0.5
	// DefaultRenewJitter spreads renewals by up to this fraction of the lifetime either way.
	DefaultRenewJitter = 0.05
	// DefaultReBootstrapInterval is the least time between two re-bootstraps forced by a
	// controller certificate that no longer verifies.
	DefaultReBootstrapInterval = 30 * time.Second
)

// Config configures an Agent. StreamAddress, BootstrapAddress, NodeID, Scope and Applier are
// required; everything else has a default.
type Config struct {
	// StreamAddress and BootstrapAddress are the host:port of the controller's stream (mTLS)
	// and bootstrap (server-auth TLS) listeners.
	StreamAddress    string
	BootstrapAddress string
	// ServerName is the DNS name the controller's certificate must carry on both listeners; the
	// host of BootstrapAddress when empty (which then must not be an IP address).
	ServerName string
	// ControllerNamespace and ControllerServiceAccount name the controller: the stream server
	// must present their SPIFFE ID in the SVID's trust domain. wellknown.InstallNamespace and
	// wellknown.ControllerServiceAccount when empty.
	ControllerNamespace      string
	ControllerServiceAccount string
	// TokenPath is re-read on every bootstrap, TrustBundlePath at every handshake with the
	// controller (see trustBundle); wellknown paths when empty.
	TokenPath       string
	TrustBundlePath string
	NodeID          string
	Scope           Scope
	Applier         Applier
	// Observer is told what happens, for readiness and metrics; nil tells nobody.
	Observer Observer
	Logger   logr.Logger
	// Backoff paces retries; DefaultBackoff when zero.
	Backoff Backoff
	// BootstrapTimeout bounds one Bootstrap call; DefaultBootstrapTimeout when zero.
	BootstrapTimeout time.Duration
	// RenewFraction and RenewJitter place renewals; DefaultRenewFraction and DefaultRenewJitter
	// when zero.
	RenewFraction float64
	RenewJitter   float64
	// ReBootstrapInterval rate-limits the re-bootstraps a failed verification of the controller
	// forces; DefaultReBootstrapInterval when zero.
	ReBootstrapInterval time.Duration
	// SnapshotPath, when set, is where the agent keeps the applied snapshot, and restores it
	// from on start (served as Degraded until a stream delivers one). It holds listener private
	// keys: it must be on a memory-backed volume, never a disk.
	SnapshotPath string
	// Clock is the time source, the wall clock when nil.
	Clock clock.Clock
	// Rand returns numbers in [0, 1) for jitter; math/rand/v2 when nil. Keys never use it.
	Rand func() float64
	// DialOptions are added to every connection.
	DialOptions []grpc.DialOption
}

func (c *Config) defaults() error {
	if c.StreamAddress == "" || c.BootstrapAddress == "" || c.NodeID == "" || c.Applier == nil {
		return errors.New("agent: stream address, bootstrap address, node ID and applier are required")
	}
	if err := c.Scope.validate(); err != nil {
		return err
	}
	if err := c.serverName(); err != nil {
		return err
	}
	c.TokenPath = orDefault(c.TokenPath, wellknown.TokenPath)
	c.TrustBundlePath = orDefault(c.TrustBundlePath, wellknown.TrustBundlePath)
	c.BootstrapTimeout = orDefault(c.BootstrapTimeout, DefaultBootstrapTimeout)
	c.RenewFraction = orDefault(c.RenewFraction, DefaultRenewFraction)
	c.RenewJitter = orDefault(c.RenewJitter, DefaultRenewJitter)
	c.ReBootstrapInterval = orDefault(c.ReBootstrapInterval, DefaultReBootstrapInterval)
	c.ControllerNamespace = orDefault(c.ControllerNamespace, wellknown.InstallNamespace)
	c.ControllerServiceAccount = orDefault(c.ControllerServiceAccount, wellknown.ControllerServiceAccount)
	if c.Backoff == (Backoff{}) {
		c.Backoff = DefaultBackoff
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return nil
}

// serverName defaults ServerName to the host of the bootstrap address.
func (c *Config) serverName() error {
	if c.ServerName != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(c.BootstrapAddress)
	if err != nil {
		return fmt.Errorf("agent: bootstrap address: %w", err)
	}
	if net.ParseIP(host) != nil {
		return fmt.Errorf("agent: bootstrap address %s is an IP address: a server name is required", c.BootstrapAddress)
	}
	c.ServerName = host
	return nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Scope is what a proxy subscribes to: the shared pool, or one Gateway's dedicated snapshot.
type Scope struct {
	// SharedPool selects the shared proxy pool; Namespace and Name must then be empty.
	SharedPool bool
	// Namespace and Name name the Gateway of a dedicated proxy.
	Namespace string
	Name      string
}

// SharedPoolScope is the scope of the shared proxy pool.
func SharedPoolScope() Scope { return Scope{SharedPool: true} }

// GatewayScope is the scope of the dedicated proxy of Gateway namespace/name.
func GatewayScope(namespace, name string) Scope { return Scope{Namespace: namespace, Name: name} }

func (s Scope) validate() error {
	switch {
	case s.SharedPool && s.Namespace == "" && s.Name == "":
		return nil
	case !s.SharedPool && s.Namespace != "" && s.Name != "":
		return nil
	default:
		return fmt.Errorf("agent: scope %s must be the shared pool or name a Gateway by namespace and name", s)
	}
}

// String returns "shared-pool" or "gateway/<namespace>/<name>".
func (s Scope) String() string {
	if s.SharedPool {
		return "shared-pool"
	}
	return "gateway/" + s.Namespace + "/" + s.Name
}

func (s Scope) proto() *discoveryv1.Scope {
	if s.SharedPool {
		return &discoveryv1.Scope{Kind: &discoveryv1.Scope_SharedPool{SharedPool: &discoveryv1.SharedPool{}}}
	}
	return &discoveryv1.Scope{Kind: &discoveryv1.Scope_Gateway{
		Gateway: &discoveryv1.GatewayRef{Namespace: s.Namespace, Name: s.Name},
	}}
}
