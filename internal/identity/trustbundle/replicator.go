package trustbundle

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/discovery/wellknown"
)

const configMapName = wellknown.TrustBundleConfigMapName

// Source is where the Replicator reads the bundle: the CA store.
type Source interface {
	tlsconfig.BundleSource
	// Subscribe returns a channel that receives a value after each change of the bundle.
	Subscribe() <-chan struct{}
}

// Target is a namespace that runs a dedicated proxy, with the object whose deletion should
// garbage-collect the copy (the Gateway, or the proxy's Deployment).
type Target struct {
	Namespace string
	Owner     metav1.OwnerReference
}

// Replicator keeps a copy of the trust bundle ConfigMap in every target namespace. The
// provisioner feeds it the target set with Sync; Start rewrites the copies whenever the bundle
// changes. It writes only on the leader.
type Replicator struct {
	client kubernetes.Interface
	source Source
	log    logr.Logger

	mu      sync.Mutex
	targets map[string]metav1.OwnerReference
}

// NewReplicator returns a Replicator copying source's bundle with c.
func NewReplicator(c kubernetes.Interface, source Source, log logr.Logger) *Replicator {
	return &Replicator{client: c, source: source, log: log, targets: map[string]metav1.OwnerReference{}}
}

// Sync makes targets the set of namespaces holding a copy: it writes the copies that are missing
// or stale and deletes the copies of namespaces no longer in the set. Without a bundle yet it
// only records the set; Start writes the copies when the bundle appears.
func (r *Replicator) Sync(ctx context.Context, targets []Target) error {
	next := make(map[string]metav1.OwnerReference, len(targets))
	for _, t := range targets {
		next[t.Namespace] = t.Owner
	}
	r.mu.Lock()
	prev := r.targets
	r.targets = next
	r.mu.Unlock()
	var errs []error
	for ns := range prev {
		if _, keep := next[ns]; !keep {
			errs = append(errs, remove(ctx, r.client, ns))
		}
	}
	errs = append(errs, r.writeAll(ctx, next))
	return errors.Join(errs...)
}

// Start rewrites every copy after each change of the bundle until ctx ends.
func (r *Replicator) Start(ctx context.Context) error {
	changes := r.source.Subscribe()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
			r.mu.Lock()
			targets := maps.Clone(r.targets)
			r.mu.Unlock()
			if err := r.writeAll(ctx, targets); err != nil {
				r.log.Error(err, "Failed to copy trust bundle")
			}
		}
	}
}

// NeedLeaderElection makes Start run on the leader only, which alone provisions proxies.
func (r *Replicator) NeedLeaderElection() bool { return true }

func (r *Replicator) writeAll(ctx context.Context, targets map[string]metav1.OwnerReference) error {
	bundle, err := r.source.Bundle()
	if err != nil {
		return nil //nolint:nilerr // no bundle yet: Start writes the copies once there is one
	}
	pem := bundle.PEM()
	var errs []error
	for _, ns := range slices.Sorted(maps.Keys(targets)) {
		owner := targets[ns]
		wrote, err := apply(ctx, r.client, desired{namespace: ns, pem: pem, owner: &owner})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if wrote {
			r.log.Info("Copied trust bundle", "namespace", ns, "roots", bundle.Len())
		}
	}
	return errors.Join(errs...)
}
