package image

import (
	"errors"
	"strings"
	"testing"
)

// Tests that the map resolves relative paths, untagged names and refuses what it does not hold.
func TestResolve(t *testing.T) {
	t.Parallel()
	m, err := Parse(strings.NewReader(`
# the operator
coxswain.dev/coxswain:dev   bin/coxswain
registry:5000/echo:latest   /opt/echo
`), "/repo")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, image, want string }{
		{"a relative path is taken from the file's directory", "coxswain.dev/coxswain:dev", "/repo/bin/coxswain"},
		{"an untagged name matches the :latest entry, even after a registry port", "registry:5000/echo", "/opt/echo"},
	} {
		got, err := m.Resolve(tc.image)
		if err != nil || got != tc.want {
			t.Errorf("%s: Resolve(%q) = %q, %v; want %q", tc.name, tc.image, got, err, tc.want)
		}
	}
	if _, err := m.Resolve("coxswain.dev/coxswain:other"); !errors.Is(err, ErrUnknown) {
		t.Errorf("an unmapped tag resolved: %v", err)
	}
}

// Tests that malformed lines and duplicates are refused with their line number.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"one-field\n", "a /x\na /y\n"} {
		if _, err := Parse(strings.NewReader(in), "/"); err == nil || !strings.Contains(err.Error(), "line ") {
			t.Errorf("Parse(%q) = %v, want a line error", in, err)
		}
	}
}
