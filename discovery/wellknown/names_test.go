package wellknown

import (
	"regexp"
	"strings"
	"testing"
)

var dns1035Label = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

func TestDedicatedProxyNameKeepsOrRepairsShortNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, gateway, class, want string
	}{
		{"a short name is gateway-class", "my-gw", "coxswain", "my-gw-coxswain"},
		{"a name of exactly 63 characters is kept", strings.Repeat("a", 54), "coxswain", strings.Repeat("a", 54) + "-coxswain"},
		{"dots become dashes", "my.gw", "coxswain", "my-gw-coxswain"},
		{"a name starting with a digit gets a prefix", "1gw", "coxswain", "gw-1gw-coxswain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := DedicatedProxyName(tt.gateway, tt.class); got != tt.want {
				t.Errorf("DedicatedProxyName(%q, %q) = %q, want %q", tt.gateway, tt.class, got, tt.want)
			}
		})
	}
}

func TestDedicatedProxyNameShortensLongNames(t *testing.T) {
	t.Parallel()
	a := DedicatedProxyName(strings.Repeat("g", 70)+"-a", "coxswain")
	b := DedicatedProxyName(strings.Repeat("g", 70)+"-b", "coxswain")
	for _, got := range []string{a, b} {
		if len(got) != MaxNameLength || !dns1035Label.MatchString(got) {
			t.Errorf("%q: want a DNS-1035 label of exactly %d characters", got, MaxNameLength)
		}
		if !strings.HasPrefix(got, strings.Repeat("g", 54)+"-") {
			t.Errorf("%q: want the truncated name followed by a dash", got)
		}
	}
	if a == b {
		t.Errorf("two long names differing only in their tail both became %q", a)
	}
	if again := DedicatedProxyName(strings.Repeat("g", 70)+"-a", "coxswain"); again != a {
		t.Errorf("not deterministic: %q then %q", a, again)
	}
}

func TestShortNameNeverEndsWithADashBeforeTheHash(t *testing.T) {
	t.Parallel()
	got := ShortName(strings.Repeat("a", 53) + "--" + strings.Repeat("b", 20))
	if strings.Contains(got, "--") || !dns1035Label.MatchString(got) {
		t.Errorf("ShortName = %q: want no double dash and a DNS-1035 label", got)
	}
}

func TestSharedGatewayServiceNameKeepsApartWhatJoinsAlike(t *testing.T) {
	t.Parallel()
	a := SharedGatewayServiceName("a-b", "c")
	b := SharedGatewayServiceName("a", "b-c")
	if a == b {
		t.Errorf("Gateways a-b/c and a/b-c both got the Service name %q", a)
	}
	if !strings.HasPrefix(a, "a-b-c-") || len(a) != len("a-b-c-")+sharedNameHashLength {
		t.Errorf("SharedGatewayServiceName(a-b, c) = %q: want a-b-c- and a %d-digit hash", a, sharedNameHashLength)
	}
	for _, got := range []string{a, b, SharedGatewayServiceName(strings.Repeat("n", 63), strings.Repeat("g.", 100)+"x"), SharedGatewayServiceName("ns", "1gw")} {
		if len(got) > MaxNameLength || !dns1035Label.MatchString(got) {
			t.Errorf("%q: want a DNS-1035 label of at most %d characters", got, MaxNameLength)
		}
	}
	if again := SharedGatewayServiceName("a-b", "c"); again != a {
		t.Errorf("not deterministic: %q then %q", a, again)
	}
}

// Tests that the name of a shared pool Gateway's Service ends with at least 64 bits of hash, also
// when its namespace and name are long enough to be cut: with 32 bits, a tenant finds offline a
// Gateway name whose Service name is a victim's in minutes.
func TestSharedGatewayServiceNameCarriesSixtyFourBitsOfHash(t *testing.T) {
	t.Parallel()
	for _, ns := range []string{"ns", strings.Repeat("n", 63)} {
		got := SharedGatewayServiceName(ns, strings.Repeat("g", 200))
		i := strings.LastIndexByte(got, '-')
		if hash := got[i+1:]; len(hash)*4 < 64 || strings.Trim(hash, "0123456789abcdef") != "" {
			t.Errorf("SharedGatewayServiceName(%s, g...) = %q: the hash %q has fewer than 64 bits", ns, got, hash)
		}
		if len(got) > MaxNameLength || !dns1035Label.MatchString(got) {
			t.Errorf("%q: want a DNS-1035 label of at most %d characters", got, MaxNameLength)
		}
	}
}
