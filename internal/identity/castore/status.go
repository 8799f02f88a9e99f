package castore

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
)

const eventAction = "LoadCA"

// report sets CAReady and, on a change of reason or a rotation, logs and records an event about
// the CA Secret.
func (s *Store) report(cfg sessionConfig, err error, rotatedFrom *x509.Certificate) {
	reason, status, msg := ReasonCALoaded, metav1.ConditionTrue, ""
	if err != nil {
		reason, status, msg = reasonOf(err), metav1.ConditionFalse, err.Error()
	} else if ca, _, cerr := s.Current(); cerr == nil {
		msg = fmt.Sprintf("CA %q from Secret %s/%s (%s mode) valid until %s", ca.Certificate().Subject.CommonName,
			s.opts.Namespace, cfg.secret, cfg.mode, ca.Certificate().NotAfter.UTC().Format("2006-01-02T15:04:05Z"))
	}
	s.opts.Board.Report(conditionType, status, reason, msg)
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: s.opts.Namespace, Name: cfg.secret}
	if rotatedFrom != nil {
		s.log.Info("Rotated CA", "secret", cfg.secret, "retiredNotAfter", rotatedFrom.NotAfter)
		s.opts.Recorder.Eventf(ref, nil, corev1.EventTypeNormal, ReasonCARotated, eventAction, "%s", msg)
	}
	if reason == s.lastReason {
		return
	}
	s.lastReason = reason
	switch {
	case err == nil:
		s.log.Info("Loaded CA", "secret", cfg.secret, "caMode", cfg.mode)
		s.opts.Recorder.Eventf(ref, nil, corev1.EventTypeNormal, ReasonCALoaded, eventAction, "%s", msg)
		return
	case errors.Is(err, ErrCASecretNotFound) && cfg.mode == v1alpha1.CAModeExternal:
		s.log.Error(err, "CA Secret absent and mode=external", "secret", cfg.secret, "namespace", s.opts.Namespace)
	default:
		s.log.Error(err, "CA unusable, discovery stays off", "secret", cfg.secret, "caMode", cfg.mode)
	}
	s.opts.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, reason, eventAction,
		"No usable discovery CA, discovery is not served: %s", msg)
}

// publish writes the trust bundle ConfigMap when there is a bundle.
func (s *Store) publish(ctx context.Context) error {
	bundle, err := s.Bundle()
	if err != nil {
		return nil //nolint:nilerr // nothing to publish yet; the ConfigMap keeps what it holds
	}
	return s.opts.Publisher.Publish(ctx, bundle)
}
