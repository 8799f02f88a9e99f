package pod

import "testing"

// Tests that $(NAME) expands only defined names and $$ escapes a dollar sign, as the kubelet
// expands command, args and env values.
func TestExpand(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"HOST": "10.0.0.1", "PORT": "80"}
	for in, want := range map[string]string{
		"--addr=$(HOST):$(PORT)": "--addr=10.0.0.1:80",
		"$(UNSET) stays":         "$(UNSET) stays",
		"$$(HOST) is escaped":    "$(HOST) is escaped",
		"trailing $":             "trailing $",
		"$(unterminated":         "$(unterminated",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
