package router_test

import (
	"net/url"
	"strings"
	"testing"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

func corsRoute(t *testing.T, c *discoveryv1.Cors) *router.CORS {
	t.Helper()
	l := routeWith(func(r *discoveryv1.Route) {
		r.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_Cors{Cors: c}}}
	})
	table, err := router.Compile(snaptest.Seq(snaptest.Resources(t, l, snaptest.Cluster(t, "ns/app:80", "127.0.0.1:1"))))
	if err != nil {
		t.Fatal(err)
	}
	return onlyRoute(t, table).CORS
}

// Tests which request origins an allowOrigins list admits: exact origins with the scheme's
// default port, "*" labels matching one or more labels to their left, and "*" alone.
func TestCORSAllowOrigin(t *testing.T) {
	t.Parallel()
	c := corsRoute(t, &discoveryv1.Cors{AllowOrigins: []string{
		"https://www.foo.com", "https://*.bar.com", "http://localhost:8080", "http://*",
	}})
	cases := []struct {
		origin string
		want   bool
	}{
		{"https://www.foo.com", true},
		{"https://WWW.Foo.com", true},
		{"https://www.foo.com:443", true},
		{"https://www.foo.com:8443", false},
		{"http://www.foo.com:80", true}, // "http://*" admits any http host on port 80
		{"https://foo.com", false},
		{"https://www.foo.com.evil.com", false},
		{"https://a.bar.com", true},
		{"https://a.b.c.bar.com", true},
		{"https://bar.com", false},
		{"https://evilbar.com", false},
		{"https://a.bar.com:444", false},
		{"http://localhost:8080", true},
		{"http://localhost", true}, // "http://*" again
		{"https://localhost:8080", false},
		{"null", false},
		{"", false},
		{"https://", false},
		{"https://a.bar.com/path", false},
		{"ftp://a.bar.com", false},
	}
	for _, tc := range cases {
		if got := c.AllowOrigin(tc.origin); got != tc.want {
			t.Errorf("AllowOrigin(%q) = %v, want %v", tc.origin, got, tc.want)
		}
	}
	if !c.EchoOrigin() {
		t.Error("a list of origins must echo the request's origin")
	}
}

// Tests that "*" admits every origin, and that the answer names the origin only with
// credentials.
func TestCORSAnyOrigin(t *testing.T) {
	t.Parallel()
	c := corsRoute(t, &discoveryv1.Cors{AllowOrigins: []string{"*"}, AllowMethods: []string{"*"}, AllowHeaders: []string{"x-a", "x-b"}})
	if !c.AllowOrigin("https://anything.example:1234") || !c.AllowOrigin("null") || c.EchoOrigin() {
		t.Errorf("any origin: %+v", c)
	}
	if !c.AnyMethod || c.Methods != "" || c.Headers != "x-a, x-b" || c.MaxAge != "5" {
		t.Errorf("compiled %+v", c)
	}
	c = corsRoute(t, &discoveryv1.Cors{AllowOrigins: []string{"*"}, AllowCredentials: true, MaxAgeSeconds: 3600})
	if !c.EchoOrigin() || c.MaxAge != "3600" {
		t.Errorf("with credentials: %+v", c)
	}
	if corsRoute(t, &discoveryv1.Cors{}).AllowOrigin("https://a.example.com") {
		t.Error("no allowOrigins admits no origin")
	}
}

// FuzzCORSAllowOrigin feeds AllowOrigin arbitrary Origin values, as clients send them: it must
// never panic, and an origin it allows must be one the list names, read as a URL.
func FuzzCORSAllowOrigin(f *testing.F) {
	for _, seed := range []string{
		"https://a.bar.com", "https://bar.com", "http://a.example.com:8080", "http://a.example.com", "null", "",
		"https://a.bar.com:443", "https://a.bar.com:0443", "https://x.bar.com/p", "https://[::1]:443", "HTTPS://A.BAR.COM",
		"https://a.bar.com:", "https://@a.bar.com", "https://a.bar.com:65536", "https://.bar.com",
		"HTTPS://%.BAR.COM",
	} {
		f.Add(seed)
	}
	c := &discoveryv1.Cors{AllowOrigins: []string{"https://*.bar.com", "http://a.example.com:8080"}}
	table, err := router.Compile(snaptest.Seq(snaptest.Resources(f, routeWith(func(r *discoveryv1.Route) {
		r.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_Cors{Cors: c}}}
	}), snaptest.Cluster(f, "ns/app:80", "127.0.0.1:1"))))
	if err != nil {
		f.Fatal(err)
	}
	p, _ := table.Port(80)
	cors := p.VirtualHosts()[0].Routes()[0].CORS
	f.Fuzz(func(t *testing.T, origin string) {
		if !cors.AllowOrigin(origin) {
			return
		}
		u, err := url.Parse(strings.ToLower(origin))
		if err != nil || u.Path != "" || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
			t.Fatalf("allowed %q, which is not an origin (%v)", origin, err)
		}
		host, port := u.Hostname(), u.Port()
		switch {
		case u.Scheme == "https" && (port == "" || port == "443") && strings.HasSuffix(host, ".bar.com") && len(host) > len(".bar.com"):
		case u.Scheme == "http" && port == "8080" && host == "a.example.com":
		default:
			t.Fatalf("allowed %q: scheme %q, host %q, port %q", origin, u.Scheme, host, port)
		}
	})
}
