package userns

import "testing"

func TestParse(t *testing.T) {
	t.Parallel()
	one := parse([]byte("         0       1000          1\n"))
	wide := parse([]byte("0 0 65536\n"))
	host := parse([]byte("         0          0 4294967295\n"))
	for _, tc := range []struct {
		name   string
		ranges []idRange
		id     uint32
		want   bool
	}{
		{"root of a one-id map", one, 0, true},
		{"nonroot in a one-id map", one, 65532, false},
		{"nonroot in the 65,536 map", wide, 65532, true},
		{"past the 65,536 map", wide, 65536, false},
		{"any id on the host", host, 4294967294, true},
	} {
		if got := mapped(tc.ranges, tc.id); got != tc.want {
			t.Errorf("%s: mapped(%d) = %v, want %v", tc.name, tc.id, got, tc.want)
		}
	}
	if got := parse([]byte("garbage\n1 2\n")); len(got) != 0 {
		t.Errorf("malformed lines parsed as %v", got)
	}
}
