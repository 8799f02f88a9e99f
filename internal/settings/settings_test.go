package settings

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"coxswain.dev/coxswain/api/v1alpha1"
)

func flagsFrom(t *testing.T, env map[string]string, args ...string) (Settings, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f := RegisterFlags(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse flags: %v", err)
	}
	return f.Settings()
}

func TestFlagsAndEnvironment(t *testing.T) {
	t.Parallel()
	withDefaults := func(mut func(*Settings)) Settings { s := Defaults(); mut(&s); return s }
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want Settings
	}{
		{name: "nothing set gives the built-in defaults", want: Defaults()},
		{
			name: "the environment replaces the defaults",
			env: map[string]string{
				EnvCAMode: "external", EnvCASecret: "my-ca", EnvSVIDTTL: "2h", EnvTrustDomain: "example.org",
				EnvPort: "6000", EnvBootstrapPort: "6001", EnvProxyImage: "registry.example/proxy:v1", EnvMaxStreamsPerIdentity: "5",
			},
			want: withDefaults(func(s *Settings) {
				s.CAMode, s.CASecretName, s.SVIDTTL, s.TrustDomain = v1alpha1.CAModeExternal, "my-ca", 2*time.Hour, "example.org"
				s.Port, s.BootstrapPort, s.ProxyImage, s.MaxStreamsPerIdentity = 6000, 6001, "registry.example/proxy:v1", 5
			}),
		},
		{
			name: "a flag wins over the environment",
			env:  map[string]string{EnvTrustDomain: "env.example", EnvPort: "6000"},
			args: []string{"--discovery-trust-domain=flag.example"},
			want: withDefaults(func(s *Settings) { s.TrustDomain, s.Port = "flag.example", 6000 }),
		},
		{
			name: "the stream cap per identity has a flag",
			args: []string{"--discovery-max-streams-per-identity=3"},
			want: withDefaults(func(s *Settings) { s.MaxStreamsPerIdentity = 3 }),
		},
		{
			name: "an empty environment variable counts as unset",
			env:  map[string]string{EnvTrustDomain: ""},
			want: Defaults(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := flagsFrom(t, tt.env, tt.args...)
			if err != nil {
				t.Fatalf("Settings() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Settings() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFlagsRejectBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		env       map[string]string
		args      []string
		wantField string
	}{
		{name: "an unknown CA mode is rejected", env: map[string]string{EnvCAMode: "manual"}, wantField: "--discovery-ca-mode"},
		{name: "a TTL that is not a duration is rejected", args: []string{"--discovery-svid-ttl=soon"}, wantField: "--discovery-svid-ttl"},
		{name: "a port that is not a number is rejected", env: map[string]string{EnvPort: "http"}, wantField: EnvPort},
		{name: "a TTL under a minute is rejected", env: map[string]string{EnvSVIDTTL: "30s"}, wantField: "discovery.svidTTL"},
		{name: "a trust domain with a scheme is rejected", args: []string{"--discovery-trust-domain=spiffe://x"}, wantField: "discovery.trustDomain"},
		{name: "equal ports are rejected", args: []string{"--discovery-port=7000", "--discovery-bootstrap-port=7000"}, wantField: "discovery.bootstrapPort"},
		{name: "a port out of range is rejected", args: []string{"--discovery-port=70000"}, wantField: "discovery.port"},
		{name: "a stream cap of zero is rejected", args: []string{"--discovery-max-streams-per-identity=0"}, wantField: "discovery.maxStreamsPerIdentity"},
		{name: "a stream cap that is not a number is rejected", env: map[string]string{EnvMaxStreamsPerIdentity: "many"}, wantField: EnvMaxStreamsPerIdentity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := flagsFrom(t, tt.env, tt.args...)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Settings() error = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.wantField) {
				t.Errorf("Settings() error %q does not name %s", err, tt.wantField)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	base := Defaults()
	base.TrustDomain = "flag.example"
	spec := &v1alpha1.CoxswainConfigSpec{
		Discovery: &v1alpha1.DiscoverySpec{
			CA:          &v1alpha1.CASpec{Mode: ptr.To(v1alpha1.CAModeExternal)},
			TrustDomain: ptr.To("resource.example"),
			SVIDTTL:     &metav1.Duration{Duration: time.Hour},
		},
		Proxy: &v1alpha1.ProxyDefaults{Replicas: ptr.To[int32](5)},
	}
	got, err := Resolve(base, spec)
	if err != nil {
		t.Fatalf("Resolve() error = %v", err)
	}
	want := base
	want.CAMode, want.TrustDomain, want.SVIDTTL, want.ProxyReplicas = v1alpha1.CAModeExternal, "resource.example", time.Hour, 5
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a field set in the CoxswainConfig wins over the flags (-want +got):\n%s", diff)
	}

	t.Run("distrusted roots come from the CoxswainConfig and must be SHA-256 fingerprints", func(t *testing.T) {
		t.Parallel()
		fp := strings.Repeat("ab", 32)
		got, err := Resolve(base, &v1alpha1.CoxswainConfigSpec{Discovery: &v1alpha1.DiscoverySpec{
			CA: &v1alpha1.CASpec{DistrustedRoots: []string{fp}},
		}})
		if err != nil || !cmp.Equal(got.DistrustedRoots, []string{fp}) {
			t.Fatalf("Resolve() = %v, %v; want the distrusted root", got.DistrustedRoots, err)
		}
		_, err = Resolve(base, &v1alpha1.CoxswainConfigSpec{Discovery: &v1alpha1.DiscoverySpec{
			CA: &v1alpha1.CASpec{DistrustedRoots: []string{"AB"}},
		}})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "discovery.ca.distrustedRoots") {
			t.Fatalf("Resolve() error = %v, want ErrInvalid naming discovery.ca.distrustedRoots", err)
		}
	})

	t.Run("a port that collides with the other listener's flag value is rejected", func(t *testing.T) {
		t.Parallel()
		spec := &v1alpha1.CoxswainConfigSpec{Discovery: &v1alpha1.DiscoverySpec{Port: ptr.To(base.BootstrapPort)}}
		_, err := Resolve(base, spec)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "discovery.bootstrapPort") {
			t.Fatalf("Resolve() error = %v, want ErrInvalid naming discovery.bootstrapPort", err)
		}
	})
	t.Run("tokens bound to no pod are refused unless the CoxswainConfig allows them", func(t *testing.T) {
		t.Parallel()
		if base.AllowUnboundTokens {
			t.Fatal("unbound tokens are allowed by default")
		}
		got, err := Resolve(base, &v1alpha1.CoxswainConfigSpec{Discovery: &v1alpha1.DiscoverySpec{AllowUnboundTokens: ptr.To(true)}})
		if err != nil || !got.AllowUnboundTokens {
			t.Fatalf("Resolve() = %t, %v; want unbound tokens allowed", got.AllowUnboundTokens, err)
		}
	})
	t.Run("endpoint slices are Verified unless the CoxswainConfig says Any", func(t *testing.T) {
		t.Parallel()
		if base.EndpointSlices != v1alpha1.EndpointSliceTrustVerified {
			t.Fatalf("default EndpointSlices = %q, want Verified", base.EndpointSlices)
		}
		got, err := Resolve(base, &v1alpha1.CoxswainConfigSpec{Backends: &v1alpha1.BackendsSpec{
			EndpointSlices: ptr.To(v1alpha1.EndpointSliceTrustAny),
		}})
		if err != nil || got.EndpointSlices != v1alpha1.EndpointSliceTrustAny || got.Effective().EndpointSlices != v1alpha1.EndpointSliceTrustAny {
			t.Fatalf("Resolve() = %q, %v; want Any, also in the effective settings", got.EndpointSlices, err)
		}
		_, err = Resolve(base, &v1alpha1.CoxswainConfigSpec{Backends: &v1alpha1.BackendsSpec{
			EndpointSlices: ptr.To(v1alpha1.EndpointSliceTrust("Everything")),
		}})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "backends.endpointSlices") {
			t.Fatalf("Resolve() error = %v, want ErrInvalid naming backends.endpointSlices", err)
		}
	})
	t.Run("the access log of the CoxswainConfig reaches the settings and the effective status", func(t *testing.T) {
		t.Parallel()
		al := &v1alpha1.AccessLog{
			Format: ptr.To(v1alpha1.AccessLogFormatText),
			Fields: []v1alpha1.AccessLogField{"status", "requestID"},
		}
		spec := &v1alpha1.CoxswainConfigSpec{Proxy: &v1alpha1.ProxyDefaults{AccessLog: al}}
		got, err := Resolve(base, spec)
		if err != nil || !cmp.Equal(got.ProxyAccessLog, al) || !cmp.Equal(got.Effective().ProxyAccessLog, al) {
			t.Fatalf("Resolve() = %+v, %v; want the access log in the settings and the effective status", got.ProxyAccessLog, err)
		}
		al.Fields[0] = "path"
		if got.ProxyAccessLog.Fields[0] != "status" {
			t.Error("the settings share the CoxswainConfig's field list")
		}
	})
	t.Run("an empty spec gives the base", func(t *testing.T) {
		t.Parallel()
		got, err := Resolve(base, &v1alpha1.CoxswainConfigSpec{})
		if err != nil || !cmp.Equal(got, base) {
			t.Fatalf("Resolve() = %v, %v; want the base unchanged", got, err)
		}
	})
}

func TestStoreNotifiesOnlyOnChange(t *testing.T) {
	t.Parallel()
	s := NewStore(Defaults())
	sub := s.Subscribe()
	if s.Set(Defaults()) {
		t.Fatal("Set() of equal settings reported a change")
	}
	select {
	case <-sub:
		t.Fatal("a subscriber was notified of equal settings")
	default:
	}
	next := Defaults()
	next.Port = 6000
	if !s.Set(next) {
		t.Fatal("Set() of new settings reported no change")
	}
	select {
	case <-sub:
	default:
		t.Fatal("a subscriber was not notified of new settings")
	}
	if got := s.Get().Port; got != 6000 {
		t.Errorf("Get().Port = %d, want 6000", got)
	}
}
