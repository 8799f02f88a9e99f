package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/features"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// Mode is how the Gateways of a run are served.
type Mode string

const (
	// Dedicated gives every Gateway a proxy of its own: the class's parametersRef names a
	// CoxswainGatewayParameters.
	Dedicated Mode = "dedicated"
	// Shared serves every Gateway from the shared proxy pool: the class has no parametersRef.
	Shared Mode = "shared"
)

// Modes lists every mode, in the order `CONFORMANCE_MODE=all` runs them.
var Modes = []Mode{Dedicated, Shared}

// ParametersNamespace and ParametersName name the CoxswainGatewayParameters of the dedicated
// class; the namespace is the harness's own, apart from the suite's.
const (
	ParametersNamespace = "coxswain-conformance"
	ParametersName      = "conformance"
)

// ParseMode returns the Mode named s.
func ParseMode(s string) (Mode, error) {
	m := Mode(s)
	if !slices.Contains(Modes, m) {
		return "", fmt.Errorf("unknown conformance mode %q: want %s or %s", s, Dedicated, Shared)
	}
	return m, nil
}

// ClassName is the name of the mode's GatewayClass.
func (m Mode) ClassName() string { return "conformance-" + string(m) }

// Objects returns what the mode needs before the suite starts, in creation order: for
// Dedicated the namespace, the parameters (one replica per Gateway) and the class naming them;
// for Shared the class alone.
//
// engine, when set, is the HTTP/1.1 engine of the dedicated proxies.
func (m Mode) Objects(engine v1alpha1.HTTP1Engine) []client.Object {
	class := &gwapiv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: m.ClassName()},
		Spec: gwapiv1.GatewayClassSpec{
			ControllerName: wellknown.GatewayControllerName,
			Description:    ptr.To(fmt.Sprintf("Gateway API conformance, %s proxies", m)),
		},
	}
	if m != Dedicated {
		return []client.Object{class}
	}
	class.Spec.ParametersRef = &gwapiv1.ParametersReference{
		Group:     gwapiv1.Group(v1alpha1.GroupVersion.Group),
		Kind:      "CoxswainGatewayParameters",
		Name:      ParametersName,
		Namespace: ptr.To(gwapiv1.Namespace(ParametersNamespace)),
	}
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ParametersNamespace}},
		&v1alpha1.CoxswainGatewayParameters{
			ObjectMeta: metav1.ObjectMeta{Namespace: ParametersNamespace, Name: ParametersName},
			Spec:       v1alpha1.CoxswainGatewayParametersSpec{Replicas: ptr.To[int32](1), HTTP1Engine: enginePtr(engine)},
		},
		class,
	}
}

// NewScheme returns a scheme of its own with the kinds the harness writes, so that the
// harness never registers anything in client-go's global scheme.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, gwapiv1.Install, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	return s, nil
}

// Ensure creates objs in order, or replaces the spec of those that exist with the one given
// (a class or parameters left behind by an earlier run with other settings).
func Ensure(ctx context.Context, c client.Client, objs []client.Object) error {
	for _, obj := range objs {
		if err := ensure(ctx, c, obj.DeepCopyObject().(client.Object)); err != nil {
			return fmt.Errorf("ensure %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
		}
	}
	return nil
}

func ensure(ctx context.Context, c client.Client, obj client.Object) error {
	err := c.Create(ctx, obj)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	existing := obj.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
		return err
	}
	switch want := obj.(type) {
	case *corev1.Namespace:
		return nil
	case *v1alpha1.CoxswainGatewayParameters:
		got := existing.(*v1alpha1.CoxswainGatewayParameters)
		got.Spec = want.Spec
		return c.Update(ctx, got)
	case *gwapiv1.GatewayClass:
		got := existing.(*gwapiv1.GatewayClass)
		if got.Spec.ControllerName != want.Spec.ControllerName {
			return fmt.Errorf("exists with controllerName %s (immutable): delete it first", got.Spec.ControllerName)
		}
		got.Spec = want.Spec
		return c.Update(ctx, got)
	default:
		return fmt.Errorf("no update rule for %T", obj)
	}
}

// Remove deletes objs in reverse order, ignoring those already gone.
func Remove(ctx context.Context, c client.Client, objs []client.Object) error {
	var errs []error
	for _, obj := range slices.Backward(objs) {
		if err := c.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("delete %T %s: %w", obj, client.ObjectKeyFromObject(obj), err))
		}
	}
	return errors.Join(errs...)
}

// ClassFeatures waits until the GatewayClass name is Accepted at its current generation and
// its status lists supported features (the operator writes both), and returns those features.
func ClassFeatures(ctx context.Context, c client.Client, name string, timeout time.Duration) ([]features.FeatureName, error) {
	var class gwapiv1.GatewayClass
	var why string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		// Every error is worth another try until the deadline: the class may not exist yet and
		// the API server may be busy. What the last status said is kept for the message.
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &class); err != nil {
			if why == "" || apierrors.IsNotFound(err) {
				why = err.Error()
			}
			return false, nil
		}
		why = classNotReady(&class)
		return why == "", nil
	})
	if err != nil {
		return nil, fmt.Errorf("GatewayClass %s not ready for the suite after %s (%s): %w", name, timeout, why, err)
	}
	out := make([]features.FeatureName, 0, len(class.Status.SupportedFeatures))
	for _, f := range class.Status.SupportedFeatures {
		out = append(out, features.FeatureName(f.Name))
	}
	return out, nil
}

// classNotReady says why the suite cannot use class yet, or "" when it can.
func classNotReady(class *gwapiv1.GatewayClass) string {
	accepted := meta.FindStatusCondition(class.Status.Conditions, string(gwapiv1.GatewayClassConditionStatusAccepted))
	switch {
	case accepted == nil:
		return "no Accepted condition: is the operator running?"
	case accepted.Status != metav1.ConditionTrue || accepted.ObservedGeneration != class.Generation:
		return fmt.Sprintf("Accepted=%s %s at generation %d, the class is at %d: %s",
			accepted.Status, accepted.Reason, accepted.ObservedGeneration, class.Generation, accepted.Message)
	case len(class.Status.SupportedFeatures) == 0:
		return "status.supportedFeatures is empty"
	}
	return ""
}

// FeatureList joins names with commas, sorted, as the suite's --supported-features takes them.
func FeatureList(names []features.FeatureName) string {
	s := make([]string, 0, len(names))
	for _, n := range names {
		s = append(s, string(n))
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

func enginePtr(e v1alpha1.HTTP1Engine) *v1alpha1.HTTP1Engine {
	if e == "" {
		return nil
	}
	return &e
}
