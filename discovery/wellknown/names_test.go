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

// labelValue is the syntax of a Kubernetes label value, without its length limit.
var labelValue = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)

// Tests the names derived from Gateway and class names of the longest length Kubernetes allows
// (253 characters, the GatewayNameMaximumLength conformance test): every name is a DNS-1035 label
// of at most 63 characters and every label value a label value of at most 63, and two names
// differing only in their last character, or only in a dot against a dash there, stay apart.
func TestNamesOfMaximumLengthGateways(t *testing.T) {
	t.Parallel()
	const prefix = "gateway-name-maximum-length-"
	gw := prefix + strings.Repeat("a", 253-len(prefix))
	other := gw[:252] + "b"
	dotted := gw[:251] + ".a"
	dashed := gw[:251] + "-a"
	class := strings.Repeat("c.", 126) + "c"
	ns := strings.Repeat("n", 63)
	names := map[string]string{}
	for _, tt := range []struct{ what, got string }{
		{"DedicatedProxyName(gw, class)", DedicatedProxyName(gw, class)},
		{"DedicatedProxyName(other, class)", DedicatedProxyName(other, class)},
		{"DedicatedProxyName(gw, coxswain)", DedicatedProxyName(gw, "coxswain")},
		{"SharedGatewayServiceName(ns, gw)", SharedGatewayServiceName(ns, gw)},
		{"SharedGatewayServiceName(ns, other)", SharedGatewayServiceName(ns, other)},
		{"SharedGatewayServiceName(ns, dotted)", SharedGatewayServiceName(ns, dotted)},
		{"SharedGatewayServiceName(ns, dashed)", SharedGatewayServiceName(ns, dashed)},
	} {
		if len(tt.got) > MaxNameLength || !dns1035Label.MatchString(tt.got) {
			t.Errorf("%s = %q: want a DNS-1035 label of at most %d characters", tt.what, tt.got, MaxNameLength)
		}
		if prev, ok := names[tt.got]; ok {
			t.Errorf("%s and %s are both %q", prev, tt.what, tt.got)
		}
		names[tt.got] = tt.what
	}
	values := map[string]string{}
	for _, v := range []string{gw, other, class, dotted, dashed} {
		got := LabelValue(v)
		if len(got) > MaxNameLength || !labelValue.MatchString(got) {
			t.Errorf("LabelValue(%q) = %q: want a label value of at most %d characters", v, got, MaxNameLength)
		}
		if prev, ok := values[got]; ok {
			t.Errorf("LabelValue of %q and %q are both %q", prev, v, got)
		}
		values[got] = v
	}
}
