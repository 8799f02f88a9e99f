package graph

import (
	"encoding/pem"
	"testing"
)

// Fuzzes the parsing of a ConfigMap's ca.crt, bytes any user who can write a ConfigMap
// chooses: it never panics, and what it accepts is only certificates, a fixed point of itself.
func FuzzCertificatesPEM(f *testing.F) {
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := certificatesPEM(data)
		if err != nil {
			return
		}
		rest := []byte(out)
		for len(rest) > 0 {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil || block.Type != "CERTIFICATE" || len(block.Headers) > 0 {
				t.Fatalf("accepted output holds more than certificates: %q", out)
			}
		}
		again, err := certificatesPEM([]byte(out))
		if err != nil || again != out {
			t.Fatalf("re-parsing the output gave %q, %v", again, err)
		}
	})
}
