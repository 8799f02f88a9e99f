package printable

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Tests that Text drops what could rewrite a terminal or reorder what people read, keeps the
// rest, and bounds the length with an ellipsis cut at a character.
func TestText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		limit int
		want  string
	}{
		{"plain text is kept", "listener ns/web/443: bad key", 64, "listener ns/web/443: bad key"},
		{"a terminal escape loses its ESC and CSI", "\x1b[31mred\x1b[0m \u009b2J", 64, "[31mred[0m 2J"},
		{"line breaks and tabs become spaces", "a\nb\r\tc", 64, "a b  c"},
		{"NUL, BEL and DEL are dropped", "a\x00b\x07c\x7f", 64, "abc"},
		{"bidirectional overrides and isolates are dropped", "evil\u202eexe.txt\u2066x\u2069", 64, "evilexe.txtx"},
		{"zero-width characters are dropped", "ad\u200bmin", 64, "admin"},
		{"invalid UTF-8 becomes U+FFFD", "a\xffb", 64, "a\uFFFDb"},
		{"a long text is cut with an ellipsis within the limit", strings.Repeat("x", 100), 10, "xxxxxxx" + Ellipsis},
		{"a cut never splits a character", "ééééé", 8, "éé" + Ellipsis},
		{"text exactly at the limit is kept", "abcde", 5, "abcde"},
		{"a limit below the ellipsis cuts without it", "abcdef", 2, "ab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Text(tt.in, tt.limit)
			if got != tt.want {
				t.Errorf("Text(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
			}
			if len(got) > tt.limit || !utf8.ValidString(got) || !Clean(got) {
				t.Errorf("Text(%q, %d) = %q: longer than the limit, invalid or not clean", tt.in, tt.limit, got)
			}
		})
	}
}

func FuzzText(f *testing.F) {
	f.Add("\x1b[31mred\u202e", 16)
	f.Add(strings.Repeat("é", 50), 7)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		if limit < 0 || limit > 1<<16 {
			return
		}
		got := Text(s, limit)
		if len(got) > limit || !utf8.ValidString(got) || !Clean(got) {
			t.Fatalf("Text(%q, %d) = %q", s, limit, got)
		}
		if Clean(s) && len(s) <= limit && got != s {
			t.Fatalf("Text changed clean text %q to %q", s, got)
		}
	})
}
