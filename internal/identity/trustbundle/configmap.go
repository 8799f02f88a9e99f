package trustbundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create
// +kubebuilder:rbac:groups="",resources=configmaps,resourceNames=coxswain-discovery-trust,verbs=get;update;delete

// Labels of every trust bundle ConfigMap Coxswain writes.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelComponent = "app.kubernetes.io/component"
	managedBy      = "coxswain"
	component      = "discovery-trust"
)

// ErrNotManaged reports a ConfigMap of the trust bundle's name that Coxswain did not write.
var ErrNotManaged = errors.New("trust bundle ConfigMap exists and is not managed by coxswain")

// desired is the content of one trust bundle ConfigMap.
type desired struct {
	namespace string
	pem       []byte
	owner     *metav1.OwnerReference
}

func (d desired) object() *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: d.namespace,
			Name:      wellknown.TrustBundleConfigMapName,
			Labels:    map[string]string{LabelManagedBy: managedBy, LabelComponent: component},
		},
		Data: map[string]string{wellknown.TrustBundleKey: string(d.pem)},
	}
	if d.owner != nil {
		cm.OwnerReferences = []metav1.OwnerReference{*d.owner}
	}
	return cm
}

// upToDate reports whether cm already holds d.
func (d desired) upToDate(cm *corev1.ConfigMap) bool {
	if !bytes.Equal([]byte(cm.Data[wellknown.TrustBundleKey]), d.pem) || len(cm.Data) != 1 {
		return false
	}
	return d.owner == nil || hasOwner(cm, *d.owner)
}

func hasOwner(cm *corev1.ConfigMap, owner metav1.OwnerReference) bool {
	for _, o := range cm.OwnerReferences {
		if o.UID == owner.UID {
			return true
		}
	}
	return false
}

func managed(cm *corev1.ConfigMap) bool {
	return cm.Labels[LabelManagedBy] == managedBy && cm.Labels[LabelComponent] == component
}

// apply creates or updates the ConfigMap d describes and reports whether it wrote. Updates carry
// the resourceVersion they read, and a conflict is retried from a fresh read.
func apply(ctx context.Context, c kubernetes.Interface, d desired) (bool, error) {
	wrote := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cms := c.CoreV1().ConfigMaps(d.namespace)
		live, err := cms.Get(ctx, wellknown.TrustBundleConfigMapName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, d.object(), metav1.CreateOptions{})
			wrote = err == nil
			return err
		}
		if err != nil {
			return err
		}
		if !managed(live) {
			return ErrNotManaged
		}
		if d.upToDate(live) {
			return nil
		}
		next := live.DeepCopy()
		want := d.object()
		next.Labels, next.Data = mergeLabels(next.Labels, want.Labels), want.Data
		if d.owner != nil && !hasOwner(next, *d.owner) {
			next.OwnerReferences = append(next.OwnerReferences, *d.owner)
		}
		_, err = cms.Update(ctx, next, metav1.UpdateOptions{})
		wrote = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("write ConfigMap %s/%s: %w", d.namespace, wellknown.TrustBundleConfigMapName, err)
	}
	return wrote, nil
}

func mergeLabels(have, want map[string]string) map[string]string {
	out := make(map[string]string, len(have)+len(want))
	for k, v := range have {
		out[k] = v
	}
	for k, v := range want {
		out[k] = v
	}
	return out
}

// remove deletes the managed trust bundle ConfigMap of namespace, if there is one.
func remove(ctx context.Context, c kubernetes.Interface, namespace string) error {
	cms := c.CoreV1().ConfigMaps(namespace)
	live, err := cms.Get(ctx, wellknown.TrustBundleConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get ConfigMap %s/%s: %w", namespace, wellknown.TrustBundleConfigMapName, err)
	}
	if !managed(live) {
		return nil
	}
	pre := metav1.Preconditions{UID: &live.UID, ResourceVersion: &live.ResourceVersion}
	err = cms.Delete(ctx, live.Name, metav1.DeleteOptions{Preconditions: &pre})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete ConfigMap %s/%s: %w", namespace, wellknown.TrustBundleConfigMapName, err)
	}
	return nil
}
