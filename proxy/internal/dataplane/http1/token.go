package http1

// The byte classes of RFC 9110 section 5.6.2 (token) and 5.5 (field values), as tables so that a
// parser classifies a byte with one load.

// tchar holds the bytes a token may contain: "!#$%&'*+-.^_`|~", digits and letters.
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// vchar holds the bytes a field value may contain between its first and last byte: VCHAR,
// obs-text, SP and HTAB. NUL, the other controls and DEL are refused (RFC 9110 section 5.5).
var vchar = func() (t [256]bool) {
	for c := 0x21; c <= 0x7e; c++ {
		t[c] = true
	}
	for c := 0x80; c <= 0xff; c++ {
		t[c] = true
	}
	t[' '], t['\t'] = true, true
	return t
}()

// IsToken reports whether b is a non-empty token.
func IsToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tchar[c] {
			return false
		}
	}
	return true
}

// HasLowerCase reports whether s holds a lower-case ASCII letter. A method is case-sensitive
// (RFC 9110 9.1) and every registered one is upper-case, but frameworks (Flask, Django, Rails)
// upper-case what they receive: a `delete` the proxy routes as another method than DELETE
// runs as DELETE there. The proxy refuses such a method with 400, as nginx does.
func HasLowerCase[S ~string | ~[]byte](s S) bool {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			return true
		}
	}
	return false
}

// IsTokenChar reports whether c may appear in a token.
func IsTokenChar(c byte) bool { return tchar[c] }

// ValidFieldValue reports whether v, with its optional whitespace already trimmed, is a field
// value: no control byte but HTAB, and neither SP nor HTAB at either end.
func ValidFieldValue(v []byte) bool {
	for _, c := range v {
		if !vchar[c] {
			return false
		}
	}
	return len(v) == 0 || v[0] != ' ' && v[0] != '\t' && v[len(v)-1] != ' ' && v[len(v)-1] != '\t'
}

// TrimOWS returns v without the optional whitespace (SP and HTAB) at either end.
func TrimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}
