package volume

import "testing"

// Tests that mount points read from mountinfo lose its octal escapes, and that a backslash
// without three octal digits stays.
func TestUnescapeMountPoint(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`/plain/path`:            "/plain/path",
		`/pods/a\040b/volumes/c`: "/pods/a b/volumes/c",
		`/tab\011and\134slash`:   "/tab\tand\\slash",
		`/trailing\04`:           `/trailing\04`,
		`/not\8octal`:            `/not\8octal`,
	} {
		if got := unescapeMountPoint(in); got != want {
			t.Errorf("unescapeMountPoint(%q) = %q, want %q", in, got, want)
		}
	}
}
