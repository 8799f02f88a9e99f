package trustbundle

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/internal/readiness"
)

// Reasons of the TrustBundlePublished condition.
const (
	ReasonPublished     = "Published"
	ReasonPublishFailed = "PublishFailed"
)

// Publisher writes the trust bundle ConfigMap of the controller namespace and reports
// TrustBundlePublished on the board.
type Publisher struct {
	client    kubernetes.Interface
	namespace string
	board     *readiness.Board
	log       logr.Logger
}

// NewPublisher returns a Publisher for the ConfigMap in namespace.
func NewPublisher(c kubernetes.Interface, namespace string, board *readiness.Board, log logr.Logger) *Publisher {
	return &Publisher{client: c, namespace: namespace, board: board, log: log}
}

// Publish makes the ConfigMap hold exactly the roots of bundle, writing only when they differ
// from what it holds.
func (p *Publisher) Publish(ctx context.Context, bundle *pki.Bundle) error {
	if bundle == nil || bundle.Len() == 0 {
		return fmt.Errorf("publish trust bundle: %w", pki.ErrNoCertificate)
	}
	wrote, err := apply(ctx, p.client, desired{namespace: p.namespace, pem: bundle.PEM()})
	if err != nil {
		p.board.Report(v1alpha1.ConditionTrustBundlePublished, metav1.ConditionFalse, ReasonPublishFailed, err.Error())
		return fmt.Errorf("publish trust bundle: %w", err)
	}
	if wrote {
		p.log.Info("Published trust bundle", "namespace", p.namespace, "roots", bundle.Len())
	}
	p.board.Report(v1alpha1.ConditionTrustBundlePublished, metav1.ConditionTrue, ReasonPublished,
		fmt.Sprintf("ConfigMap %s/%s holds %d root(s)", p.namespace, configMapName, bundle.Len()))
	return nil
}
