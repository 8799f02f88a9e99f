package castore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// leafSlack covers a bootstrap that fetched the CA just before it stopped signing, and clock skew.
const leafSlack = 2 * time.Minute

// reconcileAuto makes the Auto mode Secret exist and hold the CA the rotation plan wants, and
// returns what it holds. A Secret that does not parse is left alone and fails closed: deleting
// it makes the store generate a new CA.
func (s *Store) reconcileAuto(ctx context.Context, cfg sessionConfig, td spiffeid.TrustDomain, secret *corev1.Secret, now time.Time) (content, error) {
	var err error
	if secret == nil {
		if secret, err = s.createAuto(ctx, cfg, td, now); err != nil {
			return content{}, err
		}
	}
	have, err := decodeAuto(secret)
	if err != nil {
		return content{}, err
	}
	s.raiseTTL(have.maxTTL)
	have, dropped := withoutDistrustedSuccessor(have, s.opts.Settings.Get().DistrustedRoots)
	want, changed, err := planAuto(have, s.policy(td), now)
	if err != nil {
		return have, fmt.Errorf("%w: %w", ErrCAWrite, err)
	}
	want.maxTTL = s.longestTTL()
	changed = changed || dropped || want.maxTTL != have.maxTTL
	if dropped {
		s.log.Info("Dropped distrusted successor CA", "secret", cfg.secret)
	}
	if !changed {
		return have, checkUsable(have.signing, td, now)
	}
	if err := s.updateAuto(ctx, secret, want, now); err != nil {
		if apierrors.IsConflict(err) {
			// Another replica wrote first; its version arrives through the watch.
			return have, checkUsable(have.signing, td, now)
		}
		return have, fmt.Errorf("%w: %w", ErrCAWrite, err)
	}
	s.logPlan(cfg, have, want)
	return want, nil
}

// createAuto creates the Secret, from the CA in memory when there is one (the Secret was
// deleted) so that issued SVIDs stay valid, else from a new CA. When another replica created it
// first, it returns theirs.
func (s *Store) createAuto(ctx context.Context, cfg sessionConfig, td spiffeid.TrustDomain, now time.Time) (*corev1.Secret, error) {
	c, err := s.initialContent(td, now)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCAWrite, err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Namespace: s.opts.Namespace, Name: cfg.secret,
		Labels: map[string]string{"app.kubernetes.io/managed-by": "coxswain", "app.kubernetes.io/component": "discovery-ca"},
	}}
	if err := encodeAuto(secret, c, now); err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrCAWrite, err)
	}
	secrets := s.opts.Client.CoreV1().Secrets(s.opts.Namespace)
	created, err := secrets.Create(ctx, secret, metav1.CreateOptions{})
	if err == nil {
		s.log.Info("Created CA Secret", "secret", cfg.secret, "notAfter", c.signing.Certificate().NotAfter)
		return created, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("%w: create Secret %s: %w", ErrCAWrite, cfg.secret, err)
	}
	winner, err := secrets.Get(ctx, cfg.secret, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: read Secret %s another replica created: %w", ErrCAWrite, cfg.secret, err)
	}
	return winner, nil
}

func (s *Store) initialContent(td spiffeid.TrustDomain, now time.Time) (content, error) {
	s.mu.RLock()
	c := content{signing: s.signing, next: s.next, nextActiveAt: s.nextActiveAt, retired: s.retired, maxTTL: s.maxTTL}
	s.mu.RUnlock()
	if usable(c.signing, td, now) {
		return c, nil
	}
	ca, err := newCA(td, s.opts.CALifetime, now)
	if err != nil {
		return content{}, fmt.Errorf("generate CA: %w", err)
	}
	return content{signing: ca, retired: c.retired, maxTTL: c.maxTTL}, nil
}

// updateAuto writes c over secret, conditional on the resourceVersion it was read at.
func (s *Store) updateAuto(ctx context.Context, secret *corev1.Secret, c content, now time.Time) error {
	next := secret.DeepCopy()
	if err := encodeAuto(next, c, now); err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err := s.opts.Client.CoreV1().Secrets(s.opts.Namespace).Update(ctx, next, metav1.UpdateOptions{})
	return err
}

func (s *Store) policy(td spiffeid.TrustDomain) policy {
	overlap := s.opts.Overlap
	if overlap == 0 {
		// The longest SVID lifetime seen, not the current one: after the TTL is lowered, proxies
		// holding longer SVIDs of the old root renew (and learn the successor) only later.
		s.mu.RLock()
		overlap = max(s.opts.Settings.Get().SVIDTTL, s.maxTTL)
		s.mu.RUnlock()
	}
	return policy{td: td, lifetime: s.opts.CALifetime, overlap: overlap, leafBound: s.leafBound()}
}

func (s *Store) logPlan(cfg sessionConfig, have, want content) {
	switch {
	case want.next != nil && have.next == nil:
		s.log.Info("Prepared successor CA", "secret", cfg.secret, "activeAt", want.nextActiveAt,
			"notAfter", want.next.Certificate().NotAfter)
	case have.signing == nil || !sameCA(have.signing, want.signing):
		s.log.Info("Promoted successor CA", "secret", cfg.secret, "notAfter", want.signing.Certificate().NotAfter)
	}
}

func isWriteError(err error) bool { return errors.Is(err, ErrCAWrite) }

// loadExternal reads the CA of an External mode Secret, which must exist and hold a CA that can
// sign for td now.
func loadExternal(secret *corev1.Secret, td spiffeid.TrustDomain, now time.Time) (content, error) {
	if secret == nil {
		return content{}, ErrCASecretNotFound
	}
	ca, err := decodeCA(secret)
	if err != nil {
		return content{}, err
	}
	if err := checkUsable(ca, td, now); err != nil {
		return content{}, err
	}
	return content{signing: ca}, nil
}
