package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// SharedPoolNamespace and SharedPoolName name the shared proxy pool's Deployment (config/proxy).
const (
	SharedPoolNamespace = wellknown.InstallNamespace
	SharedPoolName      = "coxswain-shared-proxy"
)

// ParseEngine returns the HTTP/1.1 engine s names; empty leaves the proxies' own default.
func ParseEngine(s string) (v1alpha1.HTTP1Engine, error) {
	e := v1alpha1.HTTP1Engine(s)
	if s != "" && e != v1alpha1.HTTP1EngineNative && e != v1alpha1.HTTP1EngineNetHTTP {
		return "", fmt.Errorf("unknown HTTP/1.1 engine %q: want %s or %s", s, v1alpha1.HTTP1EngineNative, v1alpha1.HTTP1EngineNetHTTP)
	}
	return e, nil
}

// WithEngine returns args with the proxy's engine flag set to engine, replacing any it had.
func WithEngine(args []string, engine v1alpha1.HTTP1Engine) []string {
	prefix := wellknown.HTTP1EngineFlag + "="
	out := slices.DeleteFunc(slices.Clone(args), func(a string) bool { return strings.HasPrefix(a, prefix) })
	return append(out, prefix+string(engine))
}

// SetSharedPoolEngine makes the shared pool's proxies run engine and waits until the rollout
// has replaced every pod and they are available again.
func SetSharedPoolEngine(ctx context.Context, c client.Client, engine v1alpha1.HTTP1Engine, timeout time.Duration) error {
	var d appsv1.Deployment
	key := client.ObjectKey{Namespace: SharedPoolNamespace, Name: SharedPoolName}
	if err := c.Get(ctx, key, &d); err != nil {
		return fmt.Errorf("get shared pool %s: %w", key, err)
	}
	containers := d.Spec.Template.Spec.Containers
	if len(containers) == 0 {
		return fmt.Errorf("shared pool %s has no container", key)
	}
	want := WithEngine(containers[0].Args, engine)
	if !slices.Equal(want, containers[0].Args) {
		containers[0].Args = want
		if err := c.Update(ctx, &d); err != nil {
			return fmt.Errorf("set the engine of shared pool %s: %w", key, err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, &d); err != nil {
			return false, err
		}
		s, replicas := d.Status, int32(1)
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == replicas &&
			s.Replicas == replicas && s.AvailableReplicas == replicas, nil
	})
	if err != nil {
		return fmt.Errorf("roll shared pool %s to the %s engine: %w", key, engine, err)
	}
	return nil
}
