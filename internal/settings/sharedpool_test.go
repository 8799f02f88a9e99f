package settings

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// Tests that the shared pool's caps and metadata prefixes and the allowed proxy images and
// tracing endpoints come from the CoxswainConfig, with the documented defaults when unset.
func TestResolveSharedPoolAndAllowedImages(t *testing.T) {
	t.Parallel()
	d := Defaults()
	if d.MaxSharedGatewaysPerNamespace != wellknown.DefaultMaxSharedGatewaysPerNamespace ||
		d.MaxSharedPortsPerNamespace != wellknown.DefaultMaxSharedPortsPerNamespace ||
		d.SharedServiceLabelPrefixes != nil || d.SharedServiceAnnotationPrefixes != nil || d.AllowedProxyImages != nil || d.AllowedTracingEndpoints != nil {
		t.Errorf("defaults: %+v", d)
	}
	got, err := Resolve(d, &v1alpha1.CoxswainConfigSpec{
		Proxy: &v1alpha1.ProxyDefaults{
			AllowedImages:           []string{"registry.example/proxy@sha256:*"},
			AllowedTracingEndpoints: []string{"https://otel.observability.svc:4317"},
		},
		SharedPool: &v1alpha1.SharedPoolSpec{
			MaxGatewaysPerNamespace: ptr.To[int32](3), MaxPortsPerNamespace: ptr.To[int32](9),
			ServiceLabelPrefixes: []string{"team"}, ServiceAnnotationPrefixes: []string{"external-dns.alpha.kubernetes.io/"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := d
	want.AllowedProxyImages = []string{"registry.example/proxy@sha256:*"}
	want.AllowedTracingEndpoints = []string{"https://otel.observability.svc:4317"}
	want.MaxSharedGatewaysPerNamespace, want.MaxSharedPortsPerNamespace = 3, 9
	want.SharedServiceLabelPrefixes = []string{"team"}
	want.SharedServiceAnnotationPrefixes = []string{"external-dns.alpha.kubernetes.io/"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resolved (-want +got):\n%s", diff)
	}
	if e := got.Effective(); e.MaxSharedGatewaysPerNamespace != 3 || e.MaxSharedPortsPerNamespace != 9 {
		t.Errorf("effective %+v", e)
	}
}

// Tests that a cap outside 1 to the size of the internal port range is refused.
func TestResolveRefusesASharedPoolCapOutOfRange(t *testing.T) {
	t.Parallel()
	for _, n := range []int32{0, wellknown.MaxSharedPoolLimit + 1} {
		_, err := Resolve(Defaults(), &v1alpha1.CoxswainConfigSpec{SharedPool: &v1alpha1.SharedPoolSpec{MaxPortsPerNamespace: ptr.To(n)}})
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("maxPortsPerNamespace %d: err = %v, want ErrInvalid", n, err)
		}
	}
}

// Tests that the caps of ListenerSets come from the CoxswainConfig, with the documented defaults
// when unset, and that a cap out of range is refused: maxListenersPerPort below the 64 listeners
// a Gateway may have of its own.
func TestResolveListenerSetCaps(t *testing.T) {
	t.Parallel()
	d := Defaults()
	if d.MaxListenerSetsPerGateway != wellknown.DefaultMaxListenerSetsPerGateway ||
		d.MaxListenerSetsPerNamespace != wellknown.DefaultMaxListenerSetsPerNamespace ||
		d.MaxListenersPerPort != wellknown.DefaultMaxListenersPerPort {
		t.Errorf("defaults: %+v", d)
	}
	got, err := Resolve(d, &v1alpha1.CoxswainConfigSpec{ListenerSets: &v1alpha1.ListenerSetsSpec{
		MaxPerGateway: ptr.To[int32](5), MaxPerNamespace: ptr.To[int32](2), MaxListenersPerPort: ptr.To[int32](100),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if e := got.Effective(); e.MaxListenerSetsPerGateway != 5 || e.MaxListenerSetsPerNamespace != 2 || e.MaxListenersPerPort != 100 {
		t.Errorf("effective %+v", e)
	}
	for name, spec := range map[string]v1alpha1.ListenerSetsSpec{
		"maxPerGateway 0":          {MaxPerGateway: ptr.To[int32](0)},
		"maxPerNamespace over":     {MaxPerNamespace: ptr.To[int32](wellknown.MaxListenerLimit + 1)},
		"maxListenersPerPort 63":   {MaxListenersPerPort: ptr.To[int32](wellknown.MinMaxListenersPerPort - 1)},
		"maxListenersPerPort over": {MaxListenersPerPort: ptr.To[int32](wellknown.MaxListenerLimit + 1)},
	} {
		if _, err := Resolve(Defaults(), &v1alpha1.CoxswainConfigSpec{ListenerSets: &spec}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}
