package snapshot

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Tests that no way of printing or serialising SecretBytes shows the bytes.
func TestSecretBytesRedacts(t *testing.T) {
	t.Parallel()
	key := SecretBytes("-----BEGIN EC PRIVATE KEY-----\nsecret\n")
	secret := &Secret{Name: "ns/cert", PrivateKey: key}
	printed := map[string]string{}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		printed["fmt "+verb] = fmt.Sprintf(verb, key)
		printed["fmt struct "+verb] = fmt.Sprintf(verb, *secret)
	}
	js, err := json.Marshal(secret)
	if err != nil {
		t.Fatal(err)
	}
	printed["json"] = string(js)
	ys, err := yaml.Marshal(secret)
	if err != nil {
		t.Fatal(err)
	}
	printed["yaml"] = string(ys)
	for how, out := range printed {
		if strings.Contains(out, "secret") || strings.Contains(out, "PRIVATE") || strings.Contains(out, "2d2d") {
			t.Errorf("%s shows the key: %s", how, out)
		}
		if !strings.Contains(out, redacted) {
			t.Errorf("%s does not say %s: %s", how, redacted, out)
		}
	}
	if string(key) == redacted {
		t.Error("conversion to []byte lost the key")
	}
}
