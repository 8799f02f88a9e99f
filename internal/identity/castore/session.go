package castore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/spiffe"
)

const (
	// resync re-checks the Secret and re-publishes the bundle this often even without events.
	resync = 5 * time.Minute
	// minRetry and maxRetry bound the backoff after a failed write.
	minRetry = time.Second
	maxRetry = time.Minute
)

// sessionConfig is what a session depends on; a change restarts it.
type sessionConfig struct {
	mode   v1alpha1.CAMode
	secret string
	td     string
}

func (s *Store) sessionConfig() sessionConfig {
	st := s.opts.Settings.Get()
	return sessionConfig{mode: st.CAMode, secret: st.CASecretName, td: st.TrustDomain}
}

// runSession watches the CA Secret and re-evaluates the CA on every change of it, at every time
// the rotation state names, after a failed write, and at least every resync.
func (s *Store) runSession(ctx context.Context, cfg sessionConfig) {
	td, err := spiffe.ParseTrustDomain(cfg.td)
	if err != nil {
		s.apply(content{}, err, s.clock.Now())
		s.report(cfg, err, nil)
		<-ctx.Done()
		return
	}
	wake := make(chan struct{}, 1)
	informer := s.secretInformer(cfg.secret, wake)
	var wg sync.WaitGroup
	wg.Go(func() { informer.RunWithContext(ctx) })
	defer wg.Wait()
	if !toolscache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return
	}
	backoff := time.Duration(0)
	for {
		ok := s.evaluate(ctx, cfg, td, informer.GetStore())
		backoff = nextBackoff(backoff, ok)
		if !s.sleep(ctx, wake, s.wakeIn(cfg, backoff)) {
			return
		}
	}
}

// sleep waits for d, a Secret event or a poke; it returns false when ctx ends.
func (s *Store) sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) bool {
	timer := s.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	case <-s.poke:
	case <-timer.C():
	}
	return true
}

func nextBackoff(prev time.Duration, ok bool) time.Duration {
	switch {
	case ok:
		return 0
	case prev == 0:
		return minRetry
	default:
		return min(2*prev, maxRetry)
	}
}

// wakeIn is how long to sleep: until the next time the CA state names, the retry backoff, or
// the resync, whichever comes first.
func (s *Store) wakeIn(cfg sessionConfig, backoff time.Duration) time.Duration {
	now := s.clock.Now()
	d := resync
	if backoff > 0 {
		d = min(d, backoff)
	}
	for _, t := range s.deadlines(cfg.mode == v1alpha1.CAModeAuto) {
		if t.After(now) {
			d = min(d, t.Sub(now))
		}
	}
	return d
}

// deadlines lists the times at which the CA state changes by itself.
func (s *Store) deadlines(auto bool) []time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []time.Time
	if s.signing != nil {
		out = append(out, s.signing.Certificate().NotAfter)
		if auto && s.next == nil {
			out = append(out, rotationDue(s.signing))
		}
	}
	if auto && s.next != nil {
		out = append(out, s.nextActiveAt)
	}
	for _, r := range s.retired {
		out = append(out, r.LastLeafExpiry, r.Certificate.NotAfter)
	}
	return out
}

// secretInformer watches the one Secret name of the controller namespace and signals wake on
// every event.
func (s *Store) secretInformer(name string, wake chan<- struct{}) toolscache.SharedIndexInformer {
	secrets := s.opts.Client.CoreV1().Secrets(s.opts.Namespace)
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return secrets.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return secrets.Watch(ctx, o)
		},
	}
	informer := toolscache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, toolscache.Indexers{})
	signal := func(any) {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	_, _ = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{ // cannot fail before Run
		AddFunc: signal, DeleteFunc: signal, UpdateFunc: func(_, n any) { signal(n) },
	})
	return informer
}

// evaluate loads or rotates the CA, applies and reports it, and publishes the bundle. It
// returns false when something should be retried.
func (s *Store) evaluate(ctx context.Context, cfg sessionConfig, td spiffeid.TrustDomain, cache toolscache.Store) bool {
	now := s.clock.Now()
	s.observeTTL()
	secret := cachedSecret(cache, s.opts.Namespace, cfg.secret)
	var (
		c   content
		err error
	)
	if cfg.mode == v1alpha1.CAModeAuto {
		c, err = s.reconcileAuto(ctx, cfg, td, secret, now)
	} else {
		c, err = loadExternal(secret, td, now)
	}
	if errors.Is(err, ErrCASecretNotFound) {
		err = fmt.Errorf("%w: %s/%s does not exist", err, s.opts.Namespace, cfg.secret)
	}
	c, err = withoutDistrusted(c, err, s.opts.Settings.Get().DistrustedRoots)
	retry := isWriteError(err)
	if retry && usable(c.signing, td, now) {
		// A failed rotation step leaves the CA in force usable: keep serving and retry.
		s.log.Error(err, "Failed to write CA Secret, keeping the CA in force", "secret", cfg.secret)
		err = nil
	}
	rotatedFrom := s.apply(c, err, now)
	s.report(cfg, err, rotatedFrom)
	pubErr := s.publish(ctx)
	if pubErr != nil {
		s.log.Error(pubErr, "Failed to publish trust bundle")
	}
	return pubErr == nil && !retry
}

func cachedSecret(cache toolscache.Store, namespace, name string) *corev1.Secret {
	obj, ok, err := cache.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	secret, _ := obj.(*corev1.Secret)
	return secret
}
