package printable

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Ellipsis ends text that Text cut.
const Ellipsis = "…"

// Text returns s as it may be shown to people, in at most limit bytes: invalid UTF-8 becomes
// U+FFFD, line breaks and tabs become spaces, and every other control character (C0, DEL, C1:
// terminal escapes start with ESC or CSI) and invisible format character (the bidirectional
// overrides and isolates, zero-width characters) is dropped. Text longer than limit is cut at a
// character and ends with Ellipsis, within limit. A limit too small for Ellipsis cuts without it.
func Text(s string, limit int) string {
	if Clean(s) && len(s) <= limit {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), limit))
	cut := false
	for _, r := range strings.ToValidUTF8(s, string(utf8.RuneError)) {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			r = ' '
		case !allowed(r):
			continue
		}
		if b.Len()+utf8.RuneLen(r) > limit {
			cut = true
			break
		}
		b.WriteRune(r)
	}
	if !cut {
		return b.String()
	}
	out := b.String()
	if limit < len(Ellipsis) {
		return out
	}
	end := limit - len(Ellipsis)
	for end > 0 && end < len(out) && !utf8.RuneStart(out[end]) {
		end--
	}
	return out[:min(end, len(out))] + Ellipsis
}

// Clean reports whether s is valid UTF-8 without control or invisible format characters, so
// that Text with a limit of at least len(s) returns it unchanged.
func Clean(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !allowed(r) {
			return false
		}
	}
	return true
}

// allowed says whether r may be shown: not a control character (C0, DEL, C1), nor a format
// character (Unicode category Cf: bidirectional controls, zero-width characters), nor a line
// or paragraph separator.
func allowed(r rune) bool {
	return !unicode.IsControl(r) && !unicode.Is(unicode.Cf, r) && r != '\u2028' && r != '\u2029'
}
