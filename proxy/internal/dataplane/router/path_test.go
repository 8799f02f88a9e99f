package router_test

import (
	"strings"
	"testing"

	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// Tests the router's form of paths on the shapes that matter: unreserved escapes decoded,
// others kept in upper case, dot segments and repeated slashes resolved, encoded separators
// kept inside their segment.
func TestCleanPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"", "/", true},
		{"/a/b", "/a/b", true},
		{"/%7euser/%41", "/~user/A", true},
		{"/a/%2e%2e/b", "/b", true},
		{"/public/%2e%2e//admin/./x", "/admin/x", true},
		{"/a%2fb", "/a%2Fb", true},
		{"/rw%2F..%2Fadmin", "/rw%2F..%2Fadmin", true},
		{"/a%5c..", "/a%5C..", true},
		{"/caf%c3%a9", "/caf%C3%A9", true},
		{"/a/", "/a/", true},
		{"/a%zz", "", false},
		{"/a%2", "", false},
		{"a/b", "", false},
	} {
		got, ok := router.CleanPath(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("CleanPath(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// Tests the reading of a path by a backend that decodes encoded separators and drops ';'
// parameters: a dot or empty segment it would see is refused.
func TestSeparatorReading(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, reading   string
		ambiguous, ok bool
	}{
		{"/a/b", "/a/b", false, true},
		{"/a%2Fb", "/a/b", true, true},
		{"/a%5Cb/", "/a/b/", true, true},
		{"/app;jsessionid=1", "/app", true, true},
		{"/rw%2F..%2Fadmin", "", true, false},
		{"/x/..;/admin", "", true, false},
		{"/%2Fadmin", "", true, false},
		{"/;x/admin", "", true, false},
		{"/a/.%2Fb", "", true, false},
		{"/a/;x", "/a/", true, true},
	} {
		reading, ambiguous, ok := router.SeparatorReading(tc.in)
		if ok != tc.ok || ambiguous != tc.ambiguous || ok && reading != tc.reading {
			t.Errorf("SeparatorReading(%q) = %q, %v, %v; want %q, %v, %v", tc.in, reading, ambiguous, ok, tc.reading, tc.ambiguous, tc.ok)
		}
	}
}

// FuzzCleanPath checks the path normalization routing depends on: the result is an absolute
// path without dot segments or empty segments inside it, normalizing or escaping it again
// changes nothing, and a separator reading that is accepted holds no dot or empty segment.
func FuzzCleanPath(f *testing.F) {
	for _, seed := range []string{"/", "", "/a/b", "/a/../b", "/%2e%2e/admin", "/a//b/./c/", "/a%2Fb", "/%zz", "//x", "/a/%2E%2e/%41", "/.", "/..", "/a/b/..", "a/b", "/a%2F..%2Fb", "/a;x/..;/b"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		clean, ok := router.CleanPath(p)
		if !ok {
			return
		}
		if !strings.HasPrefix(clean, "/") {
			t.Fatalf("CleanPath(%q) = %q: not absolute", p, clean)
		}
		inner := strings.TrimSuffix(clean, "/")
		for _, bad := range []string{"/./", "/../", "//"} {
			if strings.Contains(inner+"/", bad) {
				t.Fatalf("CleanPath(%q) = %q: contains %q", p, clean, bad)
			}
		}
		if again, ok := router.CleanPath(clean); !ok || again != clean {
			t.Fatalf("CleanPath(%q) = %q, then %q (%v)", p, clean, again, ok)
		}
		const pathBytes = "/[]!$&'()*+,;=:@-._~%0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		if !strings.ContainsFunc(clean, func(r rune) bool { return !strings.ContainsRune(pathBytes, r) }) {
			if esc := router.EscapePath(clean); esc != clean {
				t.Fatalf("EscapePath(%q) = %q: changed a path in the router's form", clean, esc)
			}
		}
		reading, _, ok := router.SeparatorReading(clean)
		if !ok {
			return
		}
		for _, seg := range strings.Split(strings.TrimPrefix(reading, "/"), "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("SeparatorReading(%q) = %q: a dot segment", clean, reading)
			}
		}
	})
}
