package resource_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

func res(t *testing.T, key, value string) *discoveryv1.Resource {
	t.Helper()
	payload, err := anypb.New(wrapperspb.String(value))
	if err != nil {
		t.Fatal(err)
	}
	return &discoveryv1.Resource{Key: key, Payload: payload}
}

// contents maps each key of s to its string payload.
func contents(t *testing.T, s *resource.Set) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, p := range s.All() {
		var v wrapperspb.StringValue
		if err := p.UnmarshalTo(&v); err != nil {
			t.Fatal(err)
		}
		out[k] = v.GetValue()
	}
	return out
}

func TestNewSetRefusesDuplicateKeys(t *testing.T) {
	t.Parallel()
	_, err := resource.NewSet("v1", []*discoveryv1.Resource{res(t, "a", "1"), res(t, "b", "2"), res(t, "a", "3")})
	if !errors.Is(err, resource.ErrInvalid) {
		t.Fatalf("NewSet with a duplicate key: %v, want ErrInvalid", err)
	}
}

func TestNewSetSortsAndLooksUp(t *testing.T) {
	t.Parallel()
	s, err := resource.NewSet("v1", []*discoveryv1.Resource{res(t, "c", "3"), res(t, "a", "1"), res(t, "b", "2")})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Keys(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("keys %v", got)
	}
	if _, ok := s.Get("b"); !ok {
		t.Fatal("b not found")
	}
	if _, ok := s.Get("z"); ok {
		t.Fatal("z found")
	}
	if s.Version() != "v1" || s.Len() != 3 {
		t.Fatalf("version %q len %d", s.Version(), s.Len())
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	base, err := resource.NewSet("v1", []*discoveryv1.Resource{res(t, "a", "1"), res(t, "b", "2"), res(t, "c", "3")})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		upserts []*discoveryv1.Resource
		removed []string
		want    map[string]string
		wantErr bool
	}{
		{
			name: "upserts replace and insert, removed keys go", upserts: []*discoveryv1.Resource{res(t, "b", "2'"), res(t, "d", "4")},
			removed: []string{"a"}, want: map[string]string{"b": "2'", "c": "3", "d": "4"},
		},
		{name: "an empty delta keeps everything", want: map[string]string{"a": "1", "b": "2", "c": "3"}},
		{name: "removing every key leaves an empty set", removed: []string{"a", "b", "c"}, want: map[string]string{}},
		{name: "removing a key that is not held is refused", removed: []string{"x"}, wantErr: true},
		{name: "removing a key twice is refused", removed: []string{"a", "a"}, wantErr: true},
		{name: "upserting a key twice is refused", upserts: []*discoveryv1.Resource{res(t, "d", "4"), res(t, "d", "5")}, wantErr: true},
		{name: "upserting a removed key is refused", upserts: []*discoveryv1.Resource{res(t, "a", "9")}, removed: []string{"a"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := base.Merge("v2", tt.upserts, tt.removed)
			if tt.wantErr {
				if !errors.Is(err, resource.ErrInvalid) {
					t.Fatalf("Merge: %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, contents(t, got)); diff != "" {
				t.Fatalf("merged set (-want +got):\n%s", diff)
			}
			if got.Version() != "v2" {
				t.Fatalf("version %q", got.Version())
			}
			if diff := cmp.Diff(map[string]string{"a": "1", "b": "2", "c": "3"}, contents(t, base)); diff != "" {
				t.Fatalf("the base changed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		r    *discoveryv1.Resource
	}{
		{"a resource without a key is invalid", &discoveryv1.Resource{Payload: res(t, "x", "1").GetPayload()}},
		{"a resource without a payload is invalid", &discoveryv1.Resource{Key: "a"}},
		{"a payload without a type is invalid", &discoveryv1.Resource{Key: "a", Payload: &anypb.Any{Value: []byte{1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := resource.NewSet("v1", []*discoveryv1.Resource{res(t, "ok", "1"), tt.r})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Validate(); !errors.Is(err, resource.ErrInvalid) {
				t.Fatalf("Validate: %v, want ErrInvalid", err)
			}
		})
	}
	valid, err := resource.NewSet("v1", []*discoveryv1.Resource{res(t, "ok", "1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := valid.Validate(); err != nil {
		t.Fatalf("a valid set: %v", err)
	}
}
