package client

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNackDetail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		wantLen int
	}{
		{"a short detail is kept whole", errors.New("bad regex"), len("bad regex")},
		{"a long ASCII detail is cut at the limit", errors.New(strings.Repeat("a", 2*maxNackDetail)), maxNackDetail},
		// 341 three-byte characters end at byte 1023; the next one would straddle the limit.
		{"a long detail is cut before a character that straddles the limit", errors.New(strings.Repeat("€", 400)), 1023},
		{"invalid UTF-8 is replaced, not sent", errors.New("bad \xff byte"), len("bad \uFFFD byte")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := nackDetail(tt.err)
			if !utf8.ValidString(got) {
				t.Fatalf("nackDetail() = %q is not valid UTF-8", got)
			}
			if len(got) != tt.wantLen {
				t.Errorf("len(nackDetail()) = %d, want %d", len(got), tt.wantLen)
			}
		})
	}
}
